// Vite builds from web/, so it looks for the Svelte config here: use the project's (runes only).
export { default } from '../svelte.config.js';
