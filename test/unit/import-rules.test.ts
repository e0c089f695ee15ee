/**
 * The folder rules of docs/architecture.md ("Folders and the import rules"), checked on the source itself.
 *
 * Why: issue 23 moved every contract both ends speak into protocol/ and the shared test support into harness/; the
 * structure only stays that way if an import that runs back up a floor, between hub/ and volunteer/ or web/, or into
 * test/ fails a fast test the moment it is written. Pure: reads files, spawns nothing but `git ls-files` (without git it
 * walks the folders).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { posix } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The folders the rules speak of; a file belongs to the first whose path prefixes it. */
const FOLDERS = ['hub', 'volunteer', 'web/src', 'protocol', 'shaders', 'gguf', 'harness', 'bench', 'scripts', 'tools', 'test'] as const;
type Folder = (typeof FOLDERS)[number];

/** The folders that ship, and the harness that tests, benchmarks and scripts share: no circle among their files. */
const PRODUCTION: readonly Folder[] = ['hub', 'volunteer', 'web/src', 'protocol', 'shaders', 'gguf', 'harness'];

/** Every folder but `allowed`: for the rules that say what a folder may import rather than what it may not. */
const allBut = (...allowed: Folder[]): Folder[] => FOLDERS.filter((f) => !allowed.includes(f));

/** One rule: no file under `from` imports a file under any of `forbidden`. */
interface ImportRule {
  rule: string;
  from: Folder[];
  forbidden: Folder[];
}

const RULES: ImportRule[] = [
  { rule: 'hub/ stands on protocol/, never on the volunteer or the page', from: ['hub'], forbidden: ['volunteer', 'web/src'] },
  { rule: 'the volunteer and the page never import the hub', from: ['volunteer', 'web/src'], forbidden: ['hub'] },
  { rule: 'protocol/ imports only protocol/ and gguf/', from: ['protocol'], forbidden: allBut('protocol', 'gguf') },
  { rule: 'bench/ and scripts/ import harness/, never test/', from: ['bench', 'scripts'], forbidden: ['test'] },
  { rule: 'harness/ imports nothing of test/', from: ['harness'], forbidden: ['test'] },
  // the floors (docs/architecture.md): gguf < protocol < shaders < volunteer < web, and protocol < hub; each production
  // folder imports only its own floor and those below it, nothing of the support folders
  { rule: 'floor 0: gguf/ is ground', from: ['gguf'], forbidden: allBut('gguf') },
  { rule: 'floor 2: shaders/ stand on protocol/ and gguf/', from: ['shaders'], forbidden: allBut('shaders', 'protocol', 'gguf') },
  {
    rule: 'floor 3: volunteer/ stands on shaders/, protocol/ and gguf/',
    from: ['volunteer'],
    forbidden: allBut('volunteer', 'shaders', 'protocol', 'gguf'),
  },
  {
    rule: 'floor 4: web/src/ stands on volunteer/, shaders/, protocol/ and gguf/',
    from: ['web/src'],
    forbidden: allBut('web/src', 'volunteer', 'shaders', 'protocol', 'gguf'),
  },
  { rule: 'floor 2: hub/ stands on protocol/ and gguf/', from: ['hub'], forbidden: allBut('hub', 'protocol', 'gguf') },
];

/** The folder of a repository path, or undefined for a path outside every folder of FOLDERS. */
export function folderOf(path: string): Folder | undefined {
  return FOLDERS.find((f) => path === f || path.startsWith(`${f}/`));
}

/**
 * The relative specifiers `source` imports: `from '…'` (imports, type imports, re-exports), bare `import '…'`,
 * `import('…')`, and `new URL('….ts', import.meta.url)`. Comment lines are skipped so a doc example is not an import.
 */
export function relativeImports(source: string): string[] {
  const code = source
    .replace(/^\s*\/\*[\s\S]*?\*\//gm, '')
    .split('\n')
    .filter((l) => !/^\s*\/\//.test(l))
    .join('\n');
  const found: string[] = [];
  const patterns = [
    /\bfrom\s*['"](\.{1,2}\/[^'"]+)['"]/g,
    /\bimport\s*['"](\.{1,2}\/[^'"]+)['"]/g,
    /\bimport\s*\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g,
    /\bnew\s+URL\(\s*['"](\.{1,2}\/[^'"]+\.ts)['"]\s*,\s*import\.meta\.url/g,
  ];
  for (const p of patterns) for (const m of code.matchAll(p)) found.push(m[1] as string);
  return found;
}

/** The repository path `spec` names from `file` (query such as `?raw` dropped), matched against `known` files. */
export function resolveImport(file: string, spec: string, known: ReadonlySet<string>): string {
  const bare = posix.normalize(posix.join(posix.dirname(file), spec.replace(/\?.*$/, '')));
  for (const candidate of [bare, `${bare}.ts`, `${bare}/index.ts`]) if (known.has(candidate)) return candidate;
  return bare;
}

/** The circles of a directed graph (Tarjan's strongly connected components of more than one node, or a self-loop). */
export function circles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  let next = 0;
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) !== index.get(v)) return;
    const scc: string[] = [];
    for (;;) {
      const w = stack.pop() as string;
      onStack.delete(w);
      scc.push(w);
      if (w === v) break;
    }
    if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(scc.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

interface Edge {
  from: string;
  to: string;
}

/** The tree's files under FOLDERS: git's view (untracked but not ignored included), else a walk skipping node_modules. */
function listFiles(): string[] {
  try {
    return execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', ...FOLDERS], {
      cwd: ROOT,
      encoding: 'utf8',
    }).split('\n');
  } catch {
    // not a git checkout (an unpacked tarball): walk the folders
    const walk = (dir: string): string[] =>
      readdirSync(posix.join(ROOT, dir), { withFileTypes: true }).flatMap((d) =>
        d.name === 'node_modules' || d.name.startsWith('.') ? [] : d.isDirectory() ? walk(`${dir}/${d.name}`) : [`${dir}/${d.name}`],
      );
    return FOLDERS.flatMap((f) => (existsSync(posix.join(ROOT, f)) ? walk(f) : []));
  }
}

/** Every relative import between the .ts/.svelte files of FOLDERS. */
function edges(): Edge[] {
  const files = listFiles().filter((f) => /\.(ts|svelte)$/.test(f) && !f.includes('node_modules/') && folderOf(f) !== undefined);
  const known = new Set(files);
  const out: Edge[] = [];
  for (const file of files) {
    let source: string;
    try {
      source = readFileSync(posix.join(ROOT, file), 'utf8');
    } catch {
      continue; // listed by git but deleted in the working tree
    }
    for (const spec of relativeImports(source)) out.push({ from: file, to: resolveImport(file, spec, known) });
  }
  return out;
}

const EDGES = edges();

test('import-rules helpers: folders, specifiers, resolution, circles', () => {
  const folderRows: Array<[string, Folder | undefined]> = [
    ['hub/hub.ts', 'hub'],
    ['web/src/app.ts', 'web/src'],
    ['web/vite.config.ts', undefined],
    ['hubble/x.ts', undefined],
    ['protocol/channel/frames.ts', 'protocol'],
  ];
  for (const [path, want] of folderRows) assert.equal(folderOf(path), want, path);

  const importRows: Array<[string, string, string[]]> = [
    ['named', "import { a } from '../x.ts';", ['../x.ts']],
    ['type-only', "import type { A } from './a.ts';", ['./a.ts']],
    ['re-export', "export { b } from './b.ts';", ['./b.ts']],
    ['side effect', "import './c.ts';", ['./c.ts']],
    ['dynamic', "const m = await import('../d.ts');", ['../d.ts']],
    ['worker URL', "new URL('./w.ts', import.meta.url)", ['./w.ts']],
    ['asset URL is no import', "new URL('../bin/server', import.meta.url)", []],
    ['package is not relative', "import { test } from 'node:test';", []],
    ['comment line', "// import { a } from '../x.ts';", []],
    ['block comment', "/**\n * import { a } from '../x.ts';\n */", []],
  ];
  for (const [name, source, want] of importRows) assert.deepEqual(relativeImports(source), want, name);

  const known = new Set(['protocol/channel/index.ts', 'hub/a.ts']);
  const resolveRows: Array<[string, string, string]> = [
    ['hub/b.ts', './a.ts', 'hub/a.ts'],
    ['hub/x/y.ts', '../../protocol/channel', 'protocol/channel/index.ts'],
    ['shaders/k.ts', './k.wgsl?raw', 'shaders/k.wgsl'],
  ];
  for (const [file, spec, want] of resolveRows) assert.equal(resolveImport(file, spec, known), want, `${file} → ${spec}`);

  const circleRows: Array<[string, Array<[string, string[]]>, string[][]]> = [
    [
      'none',
      [
        ['a', ['b']],
        ['b', ['c']],
      ],
      [],
    ],
    [
      'two',
      [
        ['a', ['b']],
        ['b', ['a']],
      ],
      [['a', 'b']],
    ],
    [
      'three and a tail',
      [
        ['a', ['b']],
        ['b', ['c']],
        ['c', ['a', 'd']],
        ['d', []],
      ],
      [['a', 'b', 'c']],
    ],
    ['self-loop', [['a', ['a']]], [['a']]],
  ];
  for (const [name, g, want] of circleRows) assert.deepEqual(circles(new Map(g)), want, name);
});

test('the tree has relative imports to check (the scan works)', () => {
  assert.ok(EDGES.length > 100, `only ${EDGES.length} imports found`);
  assert.ok(EDGES.some((e) => e.from.startsWith('hub/') && e.to.startsWith('protocol/')));
  assert.ok(
    EDGES.some((e) => e.from.endsWith('.svelte')),
    'the .svelte files are read',
  );
});

for (const { rule, from, forbidden } of RULES) {
  test(`import rule: ${rule}`, () => {
    const broken = EDGES.filter((e) => {
      const a = folderOf(e.from);
      const b = folderOf(e.to);
      return a !== undefined && from.includes(a) && b !== undefined && forbidden.includes(b);
    }).map((e) => `${e.from} → ${e.to}`);
    assert.deepEqual(broken, [], `${rule}; these imports break it:\n${broken.join('\n')}`);
  });
}

test('the import graph of the production folders and the harness has no circle (type-only imports count)', () => {
  const graph = new Map<string, string[]>();
  for (const e of EDGES) {
    const a = folderOf(e.from);
    const b = folderOf(e.to);
    if (a === undefined || b === undefined || !PRODUCTION.includes(a) || !PRODUCTION.includes(b)) continue;
    graph.set(e.from, [...(graph.get(e.from) ?? []), e.to]);
  }
  const found = circles(graph);
  assert.deepEqual(found, [], `import circles (each line one circle's files):\n${found.map((c) => c.join(' ↔ ')).join('\n')}`);
});
