#!/usr/bin/env node
// `npm install` is the only set-up step: the TypeScript sources run from a bundle built when they
// change (bin/bundle.js), or through tsx's loader when it cannot be built.
import { runCli } from './bundle.js';

await runCli();
