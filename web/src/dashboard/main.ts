// placeholder: replaced by the dashboard app
