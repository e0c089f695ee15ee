/** The operator dashboard (`/dashboard`): the hub's live state from its dashboard stream, rendered by App. */
import { mount } from 'svelte';
import 'uplot/dist/uPlot.min.css';
import '../styles/base.css';
import App from './App.svelte';

const target = document.getElementById('app');
if (!target) throw new Error('the dashboard page has no #app element');
mount(App, { target });
