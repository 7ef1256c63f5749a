import { RestoreFailedError, type KproxyError } from '../../errors.ts';
import { IptablesRestoreError } from '../../kernel/iptables.ts';
import { extractLines } from './restore-writer.ts';

/**
 * describeRestoreFailure names what an iptables-restore refused ("restoring
 * WHAT: …"), with each refused line of its input and the line before it, for
 * the sync's error (the three modes that write iptables); null when err is
 * no refused restore or there is no input to quote.
 */
export function describeRestoreFailure(err: unknown, input: string | undefined, what: string): KproxyError | null {
  if (!(err instanceof IptablesRestoreError) || input === undefined) return null;
  const excerpt = extractLines(input, err.lines, 1);
  return new RestoreFailedError(`restoring ${what}: ${err.message}${excerpt ? `\n${excerpt}` : ''}`, { cause: err });
}
