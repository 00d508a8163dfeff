#!/usr/bin/env node
// The TypeScript sources run through tsx's loader: `npm install` is the only set-up step.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli.ts');
