import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

/**
 * The layers point down (docs/architecture.md): the import-boundary rule of
 * eslint.config.js refuses an upward import in server/net, server/kernel and
 * server/config, and lets the layers above import downward.
 */
// Loading typescript-eslint's parser takes seconds on a busy machine: these tests get a minute.
describe('lint: layers point down', { timeout: 60_000 }, () => {
  const eslint = new ESLint();
  const restricted = async (filePath: string, code: string): Promise<string[]> => {
    const [result] = await eslint.lintText(code, { filePath });
    return result.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
  };

  it('refuses server/kernel and server/config importing proxy, dashboard or http', async () => {
    expect(await restricted('server/kernel/example.ts', "import type { Backend } from '../proxy/backend.ts';\nexport type B = Backend;\n")).toEqual([
      expect.stringContaining('server/kernel and server/config sit below proxy, dashboard and http'),
    ]);
    expect(await restricted('server/config/example.ts', "import type { Dashboard } from '../dashboard/dashboard.ts';\nexport type D = Dashboard;\n")).toHaveLength(1);
    expect(await restricted('server/config/example.ts', "import type { NodeServers } from '../http/node-servers.ts';\nexport type N = NodeServers;\n")).toHaveLength(1);
  });

  it('refuses server/net importing anything of kproxy', async () => {
    expect(await restricted('server/net/example.ts', "import { errorMessage } from '../errors.ts';\nexport const e = errorMessage;\n")).toEqual([
      expect.stringContaining('server/net is the bottom layer'),
    ]);
  });

  it('lets the upper layers import downward', async () => {
    expect(await restricted('server/kernel/example.ts', "import { canonicalIP } from '../net/ip.ts';\nexport const c = canonicalIP;\n")).toEqual([]);
    expect(await restricted('server/proxy/example.ts', "import type { ProxyConfig } from '../config/types.ts';\nexport type P = ProxyConfig;\n")).toEqual([]);
  });
});
