/**
 * ObjectSerializer stands in for client-node's serializer in its cache.js
 * (ListWatch), which passes the informer's label and field selectors through
 * ObjectSerializer.serialize(selector, 'string'): a string comes back as it
 * is. client-node.ts points cache.js here (only when that is all cache.js
 * uses it for), so ListWatch does not load client-node's generated model
 * classes for it: about 760 modules and 0.3 s of a start through the
 * Kubernetes source.
 */
export const ObjectSerializer = {
  serialize(data: unknown, type: string): unknown {
    if (type !== 'string' || (data !== undefined && data !== null && typeof data !== 'string')) {
      throw new TypeError(`kproxy's ListWatch serializer passes strings only (asked for ${type})`);
    }
    return data;
  },
};
