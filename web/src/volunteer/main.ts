/** The volunteer page (`/`): one client, dialling the hub that served this page, rendered by App. */
import { mount } from 'svelte';
import '../styles/base.css';
import App from './App.svelte';
import { createClient } from './client-factory.ts';

const target = document.getElementById('app');
if (!target) throw new Error('the volunteer page has no #app element');
const hubUrl = window.location.origin;
// Creating the client dials nothing: it connects on join(), the visitor's consent.
mount(App, { target, props: { client: createClient(hubUrl), hubUrl } });
