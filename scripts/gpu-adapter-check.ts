/**
 * Whether a WebGPU adapter is a CPU emulation. The GPU bundle's runner stops at once on one (unless told
 * --allow-software): the scripts fall back to SwiftShader where no driver is named, and an emulated GPU's numbers would
 * be recorded as a GPU's.
 */
export interface AdapterFacts {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
  isFallbackAdapter?: boolean;
}

/** Names of the software Vulkan drivers Dawn can land on: SwiftShader (Chromium's and Dawn's), Mesa's llvmpipe/lavapipe. */
const SOFTWARE = /swiftshader|llvmpipe|lavapipe|softpipe|software rasterizer/i;

export function isSoftwareAdapter(a: AdapterFacts): boolean {
  return a.isFallbackAdapter === true || SOFTWARE.test([a.vendor, a.architecture, a.device, a.description].join(' '));
}

export function describeAdapter(a: AdapterFacts): string {
  return `adapter: ${a.vendor} / ${a.architecture} / ${a.device} / ${a.description}${a.isFallbackAdapter ? ' (fallback adapter)' : ''}`;
}
