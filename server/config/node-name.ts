/**
 * Node name rules. kube-proxy takes --hostname-override (or the config's
 * hostnameOverride), else the host name, trims and lowercases it
 * (nodeutil.GetHostname), and uses it to find its Node and its local endpoints.
 */

/** EXAMPLE_NODE_NAME is the node deploy/examples/ describes as "this" node. */
export const EXAMPLE_NODE_NAME = 'node-a';

/** normalizeNodeName trims and lowercases a name, as kube-proxy does. */
export function normalizeNodeName(name: string): string {
  return name.trim().toLowerCase();
}

/**
 * dnsSubdomainProblem returns why name is not a valid RFC 1123 DNS subdomain
 * (what a Node's metadata.name must be), or null when it is valid.
 */
export function dnsSubdomainProblem(name: string): string | null {
  if (name === '') return 'must not be empty';
  if (name.length > 253) return 'must be no more than 253 characters';
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name)) {
    return "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')";
  }
  return null;
}
