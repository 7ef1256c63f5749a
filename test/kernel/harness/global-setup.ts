import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { tiers } from '../../tiers.ts';
import { HARNESS_NAME, listNamespaces, namespacePids } from './netns.ts';

/**
 * The kernel tier's global teardown: after every kernel test file has run, no
 * namespace made by the harness (`kpt-<pid>-…`) of a finished test process may
 * remain. Leftovers are removed (their processes ended by PID first) and the
 * run fails, naming them: a leak is a harness bug even if every test passed.
 * Namespaces that existed before the run, or whose test process is alive and
 * not one of this run's workers (another run on the same machine), are not
 * this run's business.
 */
export default function setup(): () => void {
  if (!tiers().kernel.ok) return () => {};
  const before = new Set(listNamespaces());
  return () => {
    // A namespace is this run's leak when the test process that made it was a worker of
    // this vitest (it may still be winding down) or is gone; a live process elsewhere is
    // another run on the same machine, still busy with its own namespaces.
    const ours = (pid: number) => {
      if (pid === process.pid) return true; // the threads pool runs tests in this process
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        return ppid === process.pid;
      } catch {
        return true;
      }
    };
    const leaked = listNamespaces().filter((n) => {
      const m = HARNESS_NAME.exec(n);
      return m && !before.has(n) && ours(Number(m[1]));
    });
    for (const ns of leaked) {
      for (const pid of namespacePids(ns)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
      try {
        execFileSync('ip', ['netns', 'del', ns], { stdio: 'ignore' });
      } catch {
        // Reported below either way.
      }
    }
    if (leaked.length) throw new Error(`kernel tests left network namespaces behind (now removed): ${leaked.join(', ')}`);
  };
}
