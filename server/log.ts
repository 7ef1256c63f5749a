/**
 * The kproxy logger: one line per message, human-readable first (operators read
 * `kubectl logs`), with key=value fields that stay greppable. JSON output is
 * available for log pipelines (KPROXY_LOG_FORMAT=json).
 */
export type LogLevel = 'error' | 'warn' | 'info' | 'debug';
export type LogFields = Record<string, unknown>;

const RANK: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };
const TAG: Record<LogLevel, string> = { error: 'E', warn: 'W', info: 'I', debug: 'D' };

/** LogRecord is one emitted line, as sinks receive it. */
export interface LogRecord {
  time: number;
  level: LogLevel;
  component: string;
  msg: string;
  fields: LogFields;
}

export type LogSink = (record: LogRecord) => void;

export interface Logger {
  error(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  debug(msg: string, fields?: LogFields): void;
  child(component: string): Logger;
  enabled(level: LogLevel): boolean;
}

export interface LoggerOptions {
  level?: LogLevel;
  format?: 'text' | 'json';
  /** write receives each formatted line (default: process.stderr). */
  write?: (line: string) => void;
  /** sinks receive every record at or above level (the dashboard keeps recent warnings). */
  sinks?: LogSink[];
  now?: () => number;
}

function quote(value: unknown): string {
  if (value instanceof Error) value = value.message;
  if (typeof value === 'string') return /^[\w.:/@+-]*$/.test(value) && value !== '' ? value : JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || value == null) return String(value);
  return JSON.stringify(value);
}

function formatText(r: LogRecord): string {
  const ts = new Date(r.time).toISOString();
  // One record is one line: a multi-line message would split in every log pipeline.
  let line = `${TAG[r.level]} ${ts} ${r.component}] ${r.msg.replace(/\s*\n\s*/g, ' | ')}`;
  for (const [k, v] of Object.entries(r.fields)) if (v !== undefined) line += ` ${k}=${quote(v)}`;
  return line;
}

function formatJson(r: LogRecord): string {
  const fields: LogFields = {};
  for (const [k, v] of Object.entries(r.fields)) fields[k] = v instanceof Error ? v.message : v;
  return JSON.stringify({ ts: new Date(r.time).toISOString(), level: r.level, component: r.component, msg: r.msg, ...fields });
}

/** createLogger builds the root logger of a daemon instance. */
export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? (process.env.KPROXY_LOG_LEVEL as LogLevel | undefined) ?? 'info';
  const format = opts.format ?? (process.env.KPROXY_LOG_FORMAT === 'json' ? 'json' : 'text');
  const write = opts.write ?? ((line: string) => process.stderr.write(line + '\n'));
  const sinks = opts.sinks ?? [];
  const now = opts.now ?? Date.now;
  const max = RANK[level] ?? RANK.info;

  const make = (component: string): Logger => {
    const emit = (lvl: LogLevel, msg: string, fields: LogFields = {}) => {
      if (RANK[lvl] > max) return;
      const record: LogRecord = { time: now(), level: lvl, component, msg, fields };
      write(format === 'json' ? formatJson(record) : formatText(record));
      for (const sink of sinks) sink(record);
    };
    return {
      error: (m, f) => emit('error', m, f),
      warn: (m, f) => emit('warn', m, f),
      info: (m, f) => emit('info', m, f),
      debug: (m, f) => emit('debug', m, f),
      child: (c) => make(component ? `${component}/${c}` : c),
      enabled: (lvl) => RANK[lvl] <= max,
    };
  };
  return make('kproxy');
}

/** silentLogger discards everything (unit tests that do not assert on logs). */
export const silentLogger: Logger = createLogger({ write: () => {}, level: 'error' });

/** MemoryLog captures records for tests that assert on what was logged. */
export class MemoryLog {
  readonly records: LogRecord[] = [];
  readonly logger: Logger;
  constructor(level: LogLevel = 'debug') {
    this.logger = createLogger({ level, write: () => {}, sinks: [(r) => this.records.push(r)] });
  }
  lines(level?: LogLevel): string[] {
    return this.records.filter((r) => !level || r.level === level).map((r) => formatText(r));
  }
}
