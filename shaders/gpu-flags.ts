/**
 * WebGPU's flag values (from the spec), so these modules do not depend on the GPU* globals that Node must install.
 */
export const GPU_FLAGS = {
  SHADER_STAGE_COMPUTE: 0x4,
  BUFFER_MAP_READ: 0x1,
  BUFFER_COPY_SRC: 0x4,
  BUFFER_COPY_DST: 0x8,
  BUFFER_UNIFORM: 0x40,
  BUFFER_STORAGE: 0x80,
  MAP_MODE_READ: 0x1,
} as const;
