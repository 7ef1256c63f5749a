import { describe, expect, it } from 'vitest';
import { isKproxyError } from '../errors.ts';
import { parseTraceQuery, resolveFrom } from './packet.ts';

const bad = (raw: Parameters<typeof parseTraceQuery>[0]) => {
  try {
    parseTraceQuery(raw);
  } catch (err) {
    if (isKproxyError(err)) return { code: err.code, status: err.statusCode, message: err.message };
    throw err;
  }
  throw new Error('no error');
};

describe('parseTraceQuery', () => {
  it('reads a packet with canonical addresses, a source port, and from', () => {
    expect(parseTraceQuery({ proto: 'TCP', src: '10.0.0.02:40000', dst: '10.96.0.10:80', from: 'pod' })).toEqual({
      proto: 'tcp',
      src: '10.0.0.2',
      srcPort: 40000,
      dst: '10.96.0.10',
      dstPort: 80,
      from: 'pod',
      family: 'IPv4',
    });
    expect(parseTraceQuery({ proto: 'udp', src: 'FD00::2', dst: '[fd00:10:96::a]:53' })).toMatchObject({
      src: 'fd00::2',
      srcPort: null,
      dst: 'fd00:10:96::a',
      dstPort: 53,
      from: null,
      family: 'IPv6',
    });
  });

  it('names the bad field, with status 400', () => {
    expect(bad({ src: '10.0.0.2', dst: '10.96.0.10:80' })).toEqual({ code: 'KPROXY_ERR_TRACE_INPUT', status: 400, message: 'proto: missing (tcp, udp or sctp)' });
    expect(bad({ proto: 'icmp', src: '10.0.0.2', dst: '10.96.0.10:80' }).message).toBe('proto: "icmp" is not tcp, udp or sctp');
    expect(bad({ proto: 'tcp', dst: '10.96.0.10:80' }).message).toMatch(/^src: missing/);
    expect(bad({ proto: 'tcp', src: '10.0.0.300', dst: '10.96.0.10:80' }).message).toBe('src: "10.0.0.300" is not an IP address or IP:PORT');
    expect(bad({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10' }).message).toBe('dst: "10.96.0.10" has no port (write IP:PORT, [IPv6]:PORT)');
    expect(bad({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:70000' }).message).toBe('dst: "10.96.0.10:70000" is not IP:PORT');
    expect(bad({ proto: 'tcp', src: 'fd00::2', dst: '10.96.0.10:80' }).message).toBe("src: fd00::2 is not of the destination's family (IPv4)");
    expect(bad({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80', from: 'moon' }).message).toBe('from: "moon" is not pod, external or node');
  });

  it('decides where a packet enters when not told: the node for its own addresses, else outside', () => {
    const facts = { localAddresses: new Set(['10.0.0.10']) };
    expect(resolveFrom(parseTraceQuery({ proto: 'tcp', src: '10.0.0.10', dst: '10.96.0.10:80' }), facts).from).toBe('node');
    expect(resolveFrom(parseTraceQuery({ proto: 'tcp', src: '127.0.0.1', dst: '10.96.0.10:80' }), facts).from).toBe('node');
    expect(resolveFrom(parseTraceQuery({ proto: 'tcp', src: '10.0.0.2', dst: '10.96.0.10:80' }), facts).from).toBe('external');
    expect(resolveFrom(parseTraceQuery({ proto: 'tcp', src: '10.0.0.10', dst: '10.96.0.10:80', from: 'pod' }), facts).from).toBe('pod');
  });
});
