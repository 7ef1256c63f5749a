import { describe, expect, it } from 'vitest';
import { ServiceInvalidError } from '../errors.ts';
import { ServiceChangeTracker } from './service-change-tracker.ts';
import { makeService } from './testing.ts';

describe('ServiceChangeTracker and bad input', () => {
  it('reports a refused Service as invalid, naming the field', () => {
    const t = new ServiceChangeTracker('IPv4');
    const res = t.update('ns/a', makeService('ns', 'a', { clusterIP: '10.96.0.1', ports: [{ name: 'http', port: 70000, protocol: 'TCP' }] }));
    expect(res.kind).toBe('invalid');
    expect(res.kind === 'invalid' && res.error).toBeInstanceOf(ServiceInvalidError);
  });

  it('lets an error that is not about the object through: a bug is not reported as bad input', () => {
    const t = new ServiceChangeTracker('IPv4');
    const broken = makeService('ns', 'b', { clusterIP: '10.96.0.2' });
    Object.defineProperty(broken, 'spec', {
      get() {
        throw new TypeError('a bug while reading the Service');
      },
    });
    expect(() => t.update('ns/b', broken)).toThrow(TypeError);
  });
});
