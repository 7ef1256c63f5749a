import { describe, expect, it } from 'vitest';
import { RuleBuildError } from '../errors.ts';
import type { Endpoint } from './endpoint.ts';
import { buildServicePort, ServicePortCache, type ServicePortBuild } from './service-port-cache.ts';
import type { ServicePort } from './service-port.ts';

const sp = (id: string) => ({ id }) as ServicePort;

describe('ServicePortCache', () => {
  it('hands back the last build only for the same Service and endpoints objects under the same build context', () => {
    const cache = new ServicePortCache<string>();
    const a = sp('ns/a:p80/TCP');
    const eps: Endpoint[] = [];
    expect(cache.unchanged(a.id, a, eps, 'ctx1')).toBeUndefined();
    const built = buildServicePort(a, eps, () => 'rules of a');
    cache.commit(new Map([[a.id, built]]), 'ctx1');
    expect(cache.unchanged(a.id, a, eps, 'ctx1')).toBe(built);
    expect(cache.unchanged(a.id, a, [], 'ctx1')).toBeUndefined();
    expect(cache.unchanged(a.id, sp(a.id), eps, 'ctx1')).toBeUndefined();
    expect(cache.unchanged(a.id, a, eps, 'ctx2')).toBeUndefined();
    expect(cache.get(a.id)).toBe(built);
    cache.clear();
    expect(cache.builds.size).toBe(0);
    expect(cache.sameContext('ctx1')).toBe(false);
  });

  it('turns a RuleBuildError into the build of a skipped port, and lets any other error through', () => {
    const a = sp('ns/a:p80/TCP');
    const refused: ServicePortBuild<string> = buildServicePort(a, undefined, () => {
      throw new RuleBuildError('comment holds a quote');
    });
    expect(refused).toEqual({ sp: a, eps: undefined, objects: null, error: 'comment holds a quote' });
    expect(() =>
      buildServicePort(a, undefined, () => {
        throw new TypeError('a bug');
      }),
    ).toThrow(TypeError);
  });
});
