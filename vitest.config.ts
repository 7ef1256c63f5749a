import { svelte } from '@sveltejs/vite-plugin-svelte';
import { defineConfig } from 'vitest/config';

// One runner, one project per testing tier (README.md, "Testing"). Tiers that
// the machine cannot run skip themselves and say why (test/tiers.ts).
export default defineConfig({
  test: {
    globalSetup: ['test/global-setup.ts'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['server/**/*.test.ts', 'test/unit/**/*.test.ts', 'deploy/**/*.test.ts'],
          environment: 'node',
        },
      },
      {
        plugins: [svelte()],
        resolve: { conditions: ['browser'] },
        test: {
          name: 'web',
          include: ['web/**/*.test.ts'],
          environment: 'jsdom',
        },
      },
      {
        test: { name: 'api', include: ['test/api/**/*.test.ts'], environment: 'node', testTimeout: 30_000 },
      },
      {
        test: {
          name: 'kernel',
          include: ['test/kernel/**/*.test.ts'],
          // Fails the run if a kernel test left a `kpt-<pid>-…` namespace behind.
          globalSetup: ['test/kernel/harness/global-setup.ts'],
          environment: 'node',
          testTimeout: 120_000,
          hookTimeout: 120_000,
          // Kernel tests build namespaces and start daemons: run files one at a time so
          // timings stay meaningful on a 2-core machine.
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          environment: 'node',
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
