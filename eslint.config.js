// ESLint for the server (TypeScript), the dashboard (Svelte 5 + TypeScript) and
// the tests. `npm run lint` runs it and Prettier's check (.prettierrc.json;
// `npm run format` writes), and `npm test` runs lint before the tiers. None of
// the recommended sets below enables a formatting rule: formatting is Prettier's.
import js from '@eslint/js';
import svelte from 'eslint-plugin-svelte';
import globals from 'globals';
import ts from 'typescript-eslint';

/**
 * Layers point down (docs/architecture.md): the bottom layers never import the
 * domain, the dashboard or the HTTP layer.
 */
const upperLayers = ['proxy', 'dashboard', 'http', 'sources', 'events'].flatMap((dir) => [`**/server/${dir}/**`, `../${dir}/**`, `../../${dir}/**`]);

export default ts.config(
  { ignores: ['dist/', 'node_modules/', 'test/bench/results/', 'test/kernel/ipvs-shim/'] },
  js.configs.recommended,
  ...ts.configs.recommended,
  ...svelte.configs['flat/recommended'],
  {
    languageOptions: { globals: { ...globals.node }, ecmaVersion: 'latest', sourceType: 'module' },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // The dashboard's state lives in *.svelte.ts modules that keep big tables in $state.raw
      // and private caches deliberately outside reactivity (a node can hold 100k rules): a
      // reactive Map or URL there would cost memory and updates for nothing.
      'svelte/prefer-svelte-reactivity': 'off',
    },
  },
  {
    // client-node's watch callbacks and test fixtures of API objects are untyped JSON; kproxy
    // narrows them where it reads them (the validators in server/proxy).
    files: ['server/sources/k8s/**/*.ts', '**/*.test.ts', 'test/**/*.ts', 'deploy/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    files: ['**/*.d.ts'],
    rules: { '@typescript-eslint/triple-slash-reference': 'off' },
  },
  {
    files: ['web/**/*.{ts,svelte}'],
    languageOptions: { globals: { ...globals.browser } },
  },
  {
    files: ['**/*.svelte', '**/*.svelte.ts'],
    languageOptions: { parserOptions: { parser: ts.parser, extraFileExtensions: ['.svelte'] } },
  },
  {
    files: ['server/net/**/*.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: [{ group: ['../*', './*/**'], message: 'server/net is the bottom layer: it imports nothing of kproxy (docs/architecture.md).' }] }] },
  },
  {
    files: ['server/kernel/**/*.ts', 'server/config/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: upperLayers, message: 'server/kernel and server/config sit below proxy, dashboard and http: they must not import them (docs/architecture.md).' }] },
      ],
    },
  },
);
