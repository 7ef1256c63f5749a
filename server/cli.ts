#!/usr/bin/env node
import { versionLine } from './version.ts';

if (process.argv.includes('--version')) {
  process.stdout.write(versionLine() + '\n');
  process.exit(0);
}
