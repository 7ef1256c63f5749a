import { svelte } from '@sveltejs/vite-plugin-svelte';
import { defineConfig } from 'vite';

// The dashboard is built into dist/web and served by the daemon on the metrics
// listener. `npm run dev:web` proxies the API to a daemon on 127.0.0.1:10249.
export default defineConfig({
  root: 'web',
  base: './',
  plugins: [svelte()],
  build: { outDir: '../dist/web', emptyOutDir: true, sourcemap: true },
  server: {
    proxy: {
      '/api': 'http://127.0.0.1:10249',
      '/ws': { target: 'ws://127.0.0.1:10249', ws: true },
    },
  },
});
