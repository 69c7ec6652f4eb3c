"""libvgpu: a libdrm_amdgpu-like client library for the vgpu device.

Talks to ``MOUNT/dev/dri/renderD128`` with real ioctl() calls whose pointer fields
point to the caller's buffers, as libdrm does (docs/design.md section 3; the old
write()/read() frame protocol with ``VGPU_TRANSPORT=frame``), and imports nothing of
vgpu but its definitions (:mod:`vgpu.uapi`, the pointer map :mod:`vgpu.pointers`, the
SDMA/PM4/vISA encodings). Function
names follow libdrm_amdgpu without the ``amdgpu_`` prefix; ``docs/libvgpu.md`` maps
each to its libdrm counterpart and ioctl.

    with device_initialize("/tmp/vgpu") as dev, bo_alloc(dev, 1 << 20) as bo:
        bo.cpu_map()[:4] = b"abcd"
"""
from .bo import (Bo, BoInfo, amdgpu_bo_handle_type_dma_buf_fd, amdgpu_bo_handle_type_gem_flink_name,
                 amdgpu_bo_handle_type_kms, amdgpu_bo_handle_type_kms_noimport, bo_alloc, bo_cpu_map,
                 bo_cpu_unmap, bo_export, bo_free, bo_import, bo_query_info, bo_wait_for_idle,
                 create_bo_from_user_mem)
from .cs import (AMDGPU_QUERY_FENCE_TIMEOUT_IS_ABSOLUTE, BoList, CsChunks, CsFence, CsRequest, IbInfo,
                 bo_list_create, bo_list_destroy, bo_list_update, cs_chunks, cs_query_fence_status, cs_submit,
                 cs_wait_fences, fence_of)
from .ctx import Context, cs_ctx_create, cs_ctx_free, cs_ctx_override_priority
from .device import (Device, DrmDevice, DrmVersion, declare_tracer, device_deinitialize, device_initialize,
                     device_initialize_fd, get_cap, get_devices, get_version, query_firmware_version,
                     query_gpu_info, query_heap_info, query_hw_ip_count, query_hw_ip_info, query_info, query_info_struct,
                     query_timestamp, query_gpuvm_fault, query_last_fault, query_job_counters)
from .errors import (VgpuBusy, VgpuCanceled, VgpuError, VgpuInvalidArgument, VgpuNoSuchObject,
                     VgpuNotSupported, VgpuOutOfMemory, VgpuPermissionDenied, VgpuProtocolError,
                     VgpuTimeout, error_for, from_oserror)
from .ioctl import AMDGPU_TIMEOUT_INFINITE, drm_ioctl
from .code_object import CodeObject, LoadedKernel, code_object_load, code_object_parse, emit_dispatch, kernarg_user_data
from .pm4 import Pm4Ib
from .sdma import SdmaIb
from .syncobj import (Syncobj, cs_fence_to_handle, sync_file_path, sync_file_status, sync_file_wait,
                      syncobj_create, syncobj_destroy, syncobj_export, syncobj_export_sync_file,
                      syncobj_import, syncobj_import_sync_file, syncobj_query, syncobj_reset,
                      syncobj_signal, syncobj_timeline_signal, syncobj_timeline_wait, syncobj_transfer,
                      syncobj_wait)
from .va import (VA_RANGE_32_BIT, VA_RANGE_HIGH, VaManager, VaRange, bo_va_op, bo_va_op_raw,
                 va_range_alloc, va_range_free)

import types as _types

__all__ = [name for name, value in globals().items()
           if not name.startswith("_") and not isinstance(value, _types.ModuleType)]
