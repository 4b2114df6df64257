"""`vkdecode devices`: every Vulkan device, the one that would be used marked."""

from __future__ import annotations

import json

from vkdecode.cli.options import add_device_option


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_devices(args) -> int:
    from vkdecode.vk.coopmat import describe
    from vkdecode.vk.device import choose_device, enumerate_devices

    infos = enumerate_devices()
    chosen = choose_device(infos, args.device).index
    if args.json:
        print(json.dumps({"chosen": chosen, "devices": [d.as_dict() for d in infos]}, indent=2))
        return 0
    for d in infos:
        f, lim = d.features, d.limits
        yes = lambda b: "yes" if b else "no"
        mark = "*" if d.index == chosen else " "
        print(f"{mark} [{d.index}] {d.name}")
        print(
            f"      vendor {d.vendor} (0x{d.vendor_id:04x}), type {d.device_type}, "
            f"driver {d.driver_name or '?'} {d.driver_version} ({d.driver_info}), Vulkan {d.api_version}"
        )
        print(
            f"      subgroup {f['subgroup_size']} (sizes {f['min_subgroup_size']}-{f['max_subgroup_size']}), "
            f"fp16 {yes(f['float16'] and f['storage_16bit'])}, int8 {yes(f['int8'] and f['storage_8bit'])}, "
            f"subgroup arithmetic {yes(f['subgroup_arithmetic'])}, timestamps {yes(f['timestamps'])}"
        )
        print(
            f"      max storage buffer range {lim['max_storage_buffer_range'] / 2**20:.0f} MiB, "
            f"device-local memory {_gib(d.device_local_bytes)}"
        )
        print(f"      tensor cores (prompt kernels): {describe(f)}")
    print("* = the device vkdecode will use (override with --device or VKDECODE_DEVICE)")
    return 0


def add_devices_parser(sub) -> None:
    p = sub.add_parser("devices", help="list Vulkan devices and mark the one that would be used")
    add_device_option(p)
    p.add_argument("--json", action="store_true", help="print the device list as JSON")
    p.set_defaults(func=cmd_devices)
