/**
 * Lines kept as bytes (the cutter's `line-bytes` framing) and split between ClickHouse and the
 * parser (ingest/staged-chunks.ts): the same chunks, offsets and lines as the `line` framing's,
 * whatever the reads' sizes; and each line sent to the engine or left to the parser by its bytes.
 */
import { describe, expect, it } from 'vitest';
import { compileAccessFormat } from '../../../ingest/parsers/access-format.js';
import { eachRawLine, LineCutter, linesIn, type CutLimits, type Framing } from '../../../ingest/sources/line-cutter.js';
import { splitForEngine } from '../../../ingest/staged-chunks.js';
import { stagedReadingOf } from '../../../ingest/transforms/staged-rows.js';
import type { LineChunk } from '../../../ingest/types.js';
import { accessLine, FORMAT } from '../../support/ingest.js';

/** A small deterministic generator (mulberry32), so that a failure can be run again. */
function random(seed: number): (n: number) => number {
  let a = seed;
  return (n) => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
  };
}

/** `content` cut as the import streams it (fed on, `next` between chunks), `readBytes` at a time. */
function cutAll(content: Buffer, limits: CutLimits, framing: Framing, readBytes: (at: number) => number, cuts: number[] = []): LineChunk[] {
  const cutter = new LineCutter(limits, framing);
  const chunks: LineChunk[] = [];
  let start = 0;
  const cutAfter = () => cuts.find((c) => c > start) ?? Infinity;
  const take = () => {
    const cut = cutter.cut();
    chunks.push({ identity: 'test', path: 'test', startOffset: start, endOffset: cut.lineStart, lines: cut.lines, raw: cut.raw, overlong: cut.overlong });
    start = cut.lineStart;
  };
  cutter.begin(0, cutAfter());
  for (let pos = 0; pos < content.length; ) {
    let view = content.subarray(pos, pos + readBytes(pos));
    let at = pos;
    pos += view.length;
    while (view.length > 0) {
      const used = cutter.feed(view, at);
      if (used === -1) break;
      take();
      cutter.next(cutAfter());
      view = view.subarray(used);
      at += used;
    }
  }
  if (linesIn(cutter.cut()) > 0) take();
  return chunks;
}

/** A chunk's lines as [offset, text], whichever framing cut it. */
function linesOf(chunk: LineChunk): [number, string][] {
  if (chunk.raw === undefined) return chunk.lines.map((l) => [l.offset, l.text]);
  const lines: [number, string][] = [];
  eachRawLine(chunk.raw, chunk.startOffset, chunk.overlong, (_text, part, start, end, offset) => lines.push([offset, part.toString('utf8', start, end)]));
  return lines;
}

/** Lines of many lengths, some overlong, some not ASCII, some empty; the last may lack its newline. */
function content(next: (n: number) => number): Buffer {
  const pieces: string[] = [];
  for (let i = 0; i < 300; i++) {
    const kind = next(10);
    const length = kind === 0 ? 0 : kind === 1 ? 150 + next(200) : next(120);
    let line = 'x'.repeat(length).replace(/x/g, () => 'abc é"\\ '[next(8)]!);
    if (kind === 2) line = line.slice(0, 10) + '\r';
    pieces.push(line);
  }
  return Buffer.from(`${pieces.join('\n')}${next(2) === 0 ? '\n' : ''}`);
}

describe('the line-bytes framing', () => {
  it('cuts the same chunks as the line framing, with the same lines at the same offsets', () => {
    for (let seed = 1; seed <= 60; seed++) {
      const next = random(seed);
      const text = content(next);
      const limits: CutLimits = { maxLineBytes: 160, chunkMaxLines: 1 + next(40), chunkMaxBytes: 1 + next(4_000) };
      const cuts = [next(text.length), next(text.length)].sort((a, b) => a - b);
      const reads = [1 + next(7), 1 + next(300), 1 << 16];
      const readBytes = (at: number) => reads[at % reads.length]!;
      const expected = cutAll(text, limits, 'line', readBytes, cuts);
      const actual = cutAll(text, limits, 'line-bytes', (at) => reads[(at + seed) % reads.length]!, cuts);
      expect(expected.length, `seed ${seed}`).toBeGreaterThan(1);
      // An overlong line's head is what had been read when it became overlong: it depends on the reads.
      const shape = (c: LineChunk) => [c.startOffset, c.endOffset, c.overlong.map((o) => [o.offset, o.length]), linesIn(c)];
      expect(actual.map(shape), `seed ${seed}`).toEqual(expected.map(shape));
      expect(actual.map(linesOf), `seed ${seed}`).toEqual(expected.map(linesOf));
      expect(actual.every((c) => c.lines.length === 0 && c.raw !== undefined)).toBe(true);
    }
  });
});

describe('splitting a chunk between the engine and the parser', () => {
  const reading = stagedReadingOf(compileAccessFormat(FORMAT).shape)!;
  const agentLine = (n: number, agent: string) => accessLine(n).replace(/"test-agent\/\d"/, `"${agent}"`);
  const lines = [
    agentLine(1, 'plain/1'),
    agentLine(2, 'with \\x22 an escape'),
    agentLine(3, 'with\ta tab'),
    `${agentLine(4, 'plain/1')}\r`,
    agentLine(5, 'with \0 a NUL'),
    agentLine(6, 'control \x01\x1b[0m\x7f bytes'),
    agentLine(7, '-'),
    agentLine(8, 'plain/2'),
    `${agentLine(9, 'overlong')} ${'o'.repeat(600)}`,
    agentLine(10, 'known/1'),
    agentLine(11, 'plain/2'),
  ];

  /** The split of `text` cut into one chunk, read `readBytes` at a time. */
  const split = (text: string, readBytes: number) => {
    const [chunk, ...more] = cutAll(Buffer.from(text), { maxLineBytes: 512, chunkMaxLines: 1_000, chunkMaxBytes: 1 << 20 }, 'line-bytes', () => readBytes);
    expect(more).toEqual([]);
    return { chunk: chunk!, ...splitForEngine(chunk!, chunk!.raw!, reading, new Set(['known/1'])) };
  };

  for (const [what, extra] of [
    ['ASCII', ''],
    ['not all ASCII', `${agentLine(12, 'caf\u00e9')}\n`],
  ] as const) {
    it(`sends ASCII lines without a backslash, tab, CR or NUL, each after its offset (${what})`, () => {
      // The line that is not ASCII comes first: its part then holds the others (up to the overlong one).
      const text = `${extra}${lines.join('\n')}\n`;
      const offsets = lines.map((_, i) => Buffer.byteLength(extra + lines.slice(0, i).map((l) => `${l}\n`).join('')));
      const sent = [0, 5, 6, 7, 9, 10];
      const expectedBody = sent.map((i) => `${offsets[i]}\t${lines[i]}\n`).join('');
      const parsed = [1, 2, 3, 4].map((i) => ({ offset: offsets[i], text: lines[i] }));
      if (extra) parsed.unshift({ offset: 0, text: extra.slice(0, -1) });
      for (const readBytes of [1, 13, 100, 1 << 16]) {
        const s = split(text, readBytes);
        expect(s.chunk.overlong.map((o) => o.offset)).toEqual([offsets[8]]);
        expect(s.body.toString('latin1'), `reads of ${readBytes}`).toBe(expectedBody);
        expect(s.sent).toBe(sent.length);
        expect(s.parsed).toEqual(parsed);
        expect(s.agents.sort()).toEqual(['', 'control \x01\x1b[0m\x7f bytes', 'plain/1', 'plain/2']);
      }
    });
  }
});
