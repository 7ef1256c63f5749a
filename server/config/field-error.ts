/**
 * FieldError is one problem with one configuration field, rendered the way
 * Kubernetes' field.Error renders it (`iptables.masqueradeBit: Invalid value:
 * 40: must be within the range [0, 31]`), so operators who know kube-proxy's
 * messages recognise kproxy's. `field` is the path as spelt in the YAML.
 */
export interface FieldError {
  readonly field: string;
  /** type: as field.ErrorType; Syntax is a YAML syntax error, Document a problem with the file as a whole (field ""). */
  readonly type: 'Invalid' | 'Required' | 'Unsupported' | 'Unknown' | 'Duplicate' | 'Syntax' | 'Document';
  readonly value?: unknown;
  readonly detail: string;
  /** related: other fields the rule compares this one with (e.g. minSyncPeriod for syncPeriod). */
  readonly related?: readonly string[];
  /** line: 1-based line in the --config file the problem is on, when known. */
  readonly line?: number;
  /** flag: the command-line flag that set the value (flags override the file). */
  readonly flag?: string;
}

/** formatValue renders a bad value like Go's %v/%q would in a field error. */
export function formatValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  return JSON.stringify(value);
}

/** formatFieldError renders one FieldError as one line. */
export function formatFieldError(e: FieldError): string {
  let line: string;
  switch (e.type) {
    case 'Invalid':
      // No value: the field is not a scalar (a list where a mapping belongs...), say only why.
      line = e.value === undefined ? `${e.field}: ${e.detail}` : `${e.field}: Invalid value: ${formatValue(e.value)}: ${e.detail}`;
      break;
    case 'Required':
      line = `${e.field}: Required value: ${e.detail}`;
      break;
    case 'Unsupported':
      line = `${e.field}: Unsupported value: ${formatValue(e.value)}: ${e.detail}`;
      break;
    case 'Unknown':
      line = `unknown field ${JSON.stringify(e.field)}`;
      break;
    case 'Duplicate':
      line = `duplicate field ${JSON.stringify(e.field)}`;
      break;
    case 'Syntax':
      line = `YAML syntax error: ${e.detail}`;
      break;
    case 'Document':
      line = e.detail;
      break;
  }
  if (e.flag) line += ` (set by ${e.flag})`;
  if (e.line) line += ` (line ${e.line})`;
  return line;
}

/** supportedValues renders a list of allowed values like field.NotSupported does. */
export function supportedValues(values: readonly string[]): string {
  return `supported values: ${values.map((v) => JSON.stringify(v)).join(', ')}`;
}
