// Svelte 5 in runes mode only: the dashboard never uses legacy reactivity.
export default {
  compilerOptions: { runes: true },
};
