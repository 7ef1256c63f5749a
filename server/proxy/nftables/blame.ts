import type { NftOp } from '../../kernel/nft-types.ts';
import type { ServicePortObjects } from './builder.ts';

/**
 * blameServicePorts finds the service ports whose objects a refused
 * transaction's lines wrote: a chain or its rules, an affinity set, an
 * element (by the chain its verdict names, or else by the ports that want
 * that key). The proxier leaves those service ports out until they change,
 * so that one Service the kernel will not take (a limit it enforces, a value
 * it refuses) does not fail every later sync of the node, which would keep
 * every other Service's changes out too.
 *
 * Returns each blamed service port with the lines that name it, or null when
 * a refused line belongs to no service port (a fixed chain, the table): then
 * nothing can be left out, and the sync fails as a whole.
 */
export function blameServicePorts(ops: readonly NftOp[], lines: readonly number[], ports: ReadonlyMap<string, { readonly objects: ServicePortObjects | null }>): Map<string, number[]> | null {
  if (lines.length === 0) return null;
  const byChain = new Map<string, string>();
  const bySet = new Map<string, string>();
  const byElement = new Map<string, string[]>();
  for (const [id, e] of ports) {
    for (const c of e.objects?.chains ?? []) byChain.set(c.name, id);
    for (const s of e.objects?.affinitySets ?? []) bySet.set(s.name, id);
    for (const el of e.objects?.elements ?? []) {
      const k = `${el.set} ${el.key}`;
      const list = byElement.get(k);
      if (list) list.push(id);
      else byElement.set(k, [id]);
    }
  }
  const out = new Map<string, number[]>();
  for (const line of lines) {
    const op = ops[line - 1];
    if (!op) return null;
    let owners: readonly string[] = [];
    switch (op.kind) {
      case 'chain':
        owners = byChain.has(op.name) ? [byChain.get(op.name)!] : [];
        break;
      case 'rule':
        owners = byChain.has(op.chain) ? [byChain.get(op.chain)!] : [];
        break;
      case 'set': {
        const name = op.op === 'add' ? op.spec.name : op.name;
        owners = bySet.has(name) ? [bySet.get(name)!] : [];
        break;
      }
      case 'element': {
        const target = op.op === 'add' && op.value ? /^(?:goto|jump) (\S+)$/.exec(op.value)?.[1] : undefined;
        owners = target && byChain.has(target) ? [byChain.get(target)!] : (byElement.get(`${op.set} ${op.key}`) ?? []);
        break;
      }
      case 'table':
        break;
    }
    if (owners.length === 0) return null;
    for (const id of owners) {
      const list = out.get(id);
      if (list) list.push(line);
      else out.set(id, [line]);
    }
  }
  return out;
}
