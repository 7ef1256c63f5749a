// ESLint for the server (TypeScript), the dashboard (Svelte 5 + TypeScript) and
// the tests. `npm run lint` runs it and Prettier's check (.prettierrc.json;
// `npm run format` writes), and `npm test` runs lint before the tiers. None of
// the recommended sets below enables a formatting rule: formatting is Prettier's.
import js from '@eslint/js';
import svelte from 'eslint-plugin-svelte';
import globals from 'globals';
import path from 'node:path';
import ts from 'typescript-eslint';

/**
 * The layers of server/ and what each may import (docs/architecture.md,
 * "Layers"): a layer imports itself and the layers it lists, nothing else of
 * server/. "base" is the bottom files (the error catalogue, the logger, the
 * clock, the version); "composition", every other file at the top of
 * server/ (assemble.ts, daemon.ts, the commands, platform-cleanup.ts), may
 * import everything: nothing in a layer's folder is composition. A test
 * belongs to the layer of the file it tests (x.test.ts is x.ts's). testsMay
 * lists what its tests and test helpers (testing.ts) may import besides.
 * There is no exception for types: a contract sits with the layer that
 * consumes it (proxy's Source, which sources implement). The imports (`may`)
 * form no cycle (test/unit/lint-boundaries.test.ts).
 */
export const LAYERS = {
  net: { may: [] },
  base: { may: [] },
  kernel: { may: ['net', 'base'] },
  config: { may: ['net', 'base'] },
  events: { may: ['net', 'base'] },
  // The listeners: they serve what the domain hands them, and import none of it.
  http: { may: ['net', 'base', 'config'], testsMay: ['kernel', 'proxy', 'sources'] },
  // Sources implement proxy's Source and call its change handlers.
  sources: { may: ['net', 'base', 'config', 'proxy'] },
  proxy: { may: ['net', 'base', 'kernel', 'config', 'events', 'http'], testsMay: ['sources'] },
  dashboard: { may: ['net', 'base', 'kernel', 'config', 'events', 'http', 'sources', 'proxy'], testsMay: ['composition'] },
  // The packet tracer walks the dashboard's kernel views; the dashboard never imports it.
  trace: { may: ['net', 'base', 'kernel', 'config', 'events', 'http', 'sources', 'proxy', 'dashboard'] },
  // One descriptor per proxy mode (server/modes/): its backends, its kernel view, its metrics; the composition iterates them.
  modes: { may: ['net', 'base', 'kernel', 'config', 'events', 'proxy', 'dashboard'] },
  composition: { may: null },
};

/**
 * MODE_FOLDERS are the proxy modes' folders in server/proxy/. A mode imports
 * the shared proxy code (server/proxy/, and xtables/, the iptables language of
 * the modes that write iptables), never another mode: what two modes share
 * moves out of both (docs/architecture.md, "Layers"). The shared code imports
 * no mode, except in its tests (which may run every mode); what needs every
 * mode (assemble.ts, platform-cleanup.ts) is the composition.
 */
export const MODE_FOLDERS = ['iptables', 'ipvs', 'nftables', 'userspace'];

/**
 * MODE_PUBLIC_FILE is a mode folder's public file: outside server/proxy (the
 * dashboard, the tracer, the modes' descriptors, the composition) a mode is
 * imported through it alone, so what the others read of a mode (what it is
 * built with, what its backend reports, the names of the objects it writes)
 * is one file, and its proxier's internals stay its own. Tests and test
 * helpers may reach further (harnesses, golden cases).
 */
export const MODE_PUBLIC_FILE = 'index.ts';

const BASE_FILES = new Set(['errors.ts', 'log.ts', 'clock.ts', 'clock-fake.ts', 'version.ts']);
const SERVER = path.join(import.meta.dirname, 'server');

/** layerOf names the layer of a path relative to server/ (null: outside server/). */
export function layerOf(rel) {
  if (rel.startsWith('..') || path.isAbsolute(rel)) return null;
  const file = rel
    .split(path.sep)
    .join('/')
    .replace(/\.test\.ts$/, '.ts');
  if (BASE_FILES.has(file)) return 'base';
  const slash = file.indexOf('/');
  return slash < 0 ? 'composition' : file.slice(0, slash);
}

/** modeOf names the mode folder of a path relative to server/ (null: not inside one). */
export function modeOf(rel) {
  const parts = rel.split(path.sep);
  return parts[0] === 'proxy' && parts.length > 2 && MODE_FOLDERS.includes(parts[1]) ? parts[1] : null;
}

const layerName = (layer) => (layer === 'base' ? 'the bottom files' : layer === 'composition' ? 'the composition' : `server/${layer}`);

/** layersRule reports an import (static, dynamic, re-export or import type) of a layer the importing file's layer may not use. */
const layersRule = {
  meta: { type: 'problem', schema: [], docs: { description: 'server/ layers import only downward (docs/architecture.md)' } },
  create(context) {
    const from = path.relative(SERVER, context.filename);
    const layer = layerOf(from);
    const rules = layer && LAYERS[layer];
    if (!rules) return {};
    const isTest = /\.test\.ts$/.test(from) || path.basename(from) === 'testing.ts';
    const allowed = rules.may === null ? null : new Set([layer, ...rules.may, ...(isTest ? (rules.testsMay ?? []) : [])]);
    const mode = modeOf(from);
    const check = (node, source) => {
      const spec = source?.value;
      if (typeof spec !== 'string' || !spec.startsWith('.')) return;
      const rel = path.relative(SERVER, path.resolve(path.dirname(context.filename), spec));
      const target = layerOf(rel);
      const targetMode = target === 'proxy' ? modeOf(rel) : null;
      if (layer === 'proxy' && targetMode !== null && targetMode !== mode && (mode !== null || !isTest)) {
        const who = mode ? `server/proxy/${mode}` : 'the shared proxy code';
        const why = mode ? 'a mode imports no other mode: what two modes share lives in server/proxy/ or server/proxy/xtables/' : 'it imports no mode: what needs every mode is the composition';
        context.report({ node, message: `${who} may not import server/proxy/${targetMode} ('${spec}'): ${why} (docs/architecture.md, "Layers").` });
        return;
      }
      if (layer !== 'proxy' && targetMode !== null && !isTest && rel.split(path.sep).slice(2).join('/') !== MODE_PUBLIC_FILE) {
        context.report({
          node,
          message: `${layerName(layer)} may not import a file of server/proxy/${targetMode} but its public file ('${spec}'): outside server/proxy a mode is imported through server/proxy/${targetMode}/${MODE_PUBLIC_FILE} (docs/architecture.md, "Layers").`,
        });
        return;
      }
      if (allowed === null || target === null || allowed.has(target)) return;
      const may = rules.may.length ? `only ${rules.may.map(layerName).join(', ')}` : 'nothing of kproxy';
      context.report({ node, message: `${layerName(layer)} may not import ${layerName(target)} ('${spec}'): it imports ${may} (docs/architecture.md, "Layers").` });
    };
    return {
      ImportDeclaration: (node) => check(node, node.source),
      ExportNamedDeclaration: (node) => check(node, node.source),
      ExportAllDeclaration: (node) => check(node, node.source),
      ImportExpression: (node) => check(node, node.source),
      TSImportType: (node) => check(node, node.source ?? node.argument?.literal),
    };
  },
};

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
    files: ['server/**/*.ts'],
    plugins: { kproxy: { rules: { layers: layersRule } } },
    rules: { 'kproxy/layers': 'error' },
  },
);
