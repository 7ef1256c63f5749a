/**
 * What client-node's config.js (KubeConfig) imports from its generated index,
 * from the two small modules that define it: client-node.ts points config.js
 * here, so loading KubeConfig does not load every generated API and model.
 */
export { createConfiguration } from '@kubernetes/client-node/dist/gen/configuration.js';
export { ServerConfiguration } from '@kubernetes/client-node/dist/gen/servers.js';
