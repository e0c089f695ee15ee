/** The kernel's bytes in a page bundled with expertKernelPlugin() (shaders/wasm/vite-plugin.ts). */
declare module 'virtual:expertswarm-kernel' {
  const bytes: Uint8Array<ArrayBuffer>;
  export default bytes;
}
