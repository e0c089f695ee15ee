/**
 * Bundles the GPU bundle's entry points (scripts/gpu-bundle-plan.ts ENTRIES) with esbuild: one ES module each, all
 * npm dependencies inside but the EXTERNAL_PACKAGES, every repository module's `import.meta.url` rewritten to its own
 * place under the app root (rewriteImportMetaUrl), so paths such as coordinator/bin/linkcpp-server and shaders/wgsl/
 * resolve in app/ as they do in the repository.
 */
import { readFile } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { type Plugin, build } from 'esbuild';
import { BANNER, type BundleEntry, EXTERNAL_PACKAGES, rewriteImportMetaUrl } from './gpu-bundle-plan.ts';

function importMetaUrlPlugin(root: string): Plugin {
  return {
    name: 'expertswarm-import-meta-url',
    setup(b) {
      b.onLoad({ filter: /\.(ts|js|mjs)$/ }, async (args) => {
        const rel = relative(root, args.path).split(sep).join('/');
        // npm packages keep their own import.meta.url: only the external ones use it, and those are not bundled.
        if (rel.startsWith('..') || rel.startsWith('node_modules/')) return undefined;
        const source = await readFile(args.path, 'utf8');
        return { contents: rewriteImportMetaUrl(source, rel), loader: args.path.endsWith('.ts') ? 'ts' : 'js' };
      });
    },
  };
}

export interface BundleInputs {
  /** Repository source files in the bundles. */
  files: number;
  /** npm packages bundled in (not the external ones). */
  packages: string[];
}

export async function bundleEntries(root: string, appDir: string, entries: readonly BundleEntry[]): Promise<BundleInputs> {
  const files = new Set<string>();
  const packages = new Set<string>();
  for (const e of entries) {
    const result = await build({
      entryPoints: [join(root, e.src)],
      outfile: join(appDir, e.out),
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      external: [...EXTERNAL_PACKAGES],
      banner: { js: BANNER },
      plugins: [importMetaUrlPlugin(root)],
      // Readable stack traces matter more on a one-off host than the bytes, which xz takes back anyway.
      minify: false,
      legalComments: 'none',
      metafile: true,
      logLevel: 'warning',
    });
    for (const input of Object.keys(result.metafile.inputs)) {
      const m = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(input);
      if (m) packages.add(m[1] as string);
      else files.add(input);
    }
  }
  return { files: files.size, packages: [...packages].sort() };
}
