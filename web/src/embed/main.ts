// placeholder: replaced by the embed app
