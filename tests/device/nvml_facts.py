# SPDX-License-Identifier: Apache-2.0
"""What NVML answers on this machine, through NVIDIA's own Python binding (nvidia-ml-py): the
reference the agent's NVML reader is compared with on a real GPU. One JSON document on stdout;
every query that fails is recorded with its NVML error instead of a value."""
import json

import pynvml as N


def q(fn, *args):
    try:
        v = fn(*args)
        if isinstance(v, bytes):
            v = v.decode()
        if hasattr(v, "_fields_"):
            v = {f[0]: getattr(v, f[0]) for f in v._fields_}
        return v
    except N.NVMLError as e:
        return {"error": str(e)}
    except Exception as e:  # a binding without that call
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    N.nvmlInit()
    out = {"driver": q(N.nvmlSystemGetDriverVersion), "nvml": q(N.nvmlSystemGetNVMLVersion),
           "cuda_driver": q(N.nvmlSystemGetCudaDriverVersion_v2), "devices": []}
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        d = {"index": i, "name": q(N.nvmlDeviceGetName, h), "uuid": q(N.nvmlDeviceGetUUID, h),
             "pci": q(lambda: N.nvmlDeviceGetPciInfo(h).busId)}
        for k, c in (("sm", N.NVML_CLOCK_SM), ("mem", N.NVML_CLOCK_MEM),
                     ("graphics", N.NVML_CLOCK_GRAPHICS)):
            d["clock_" + k] = q(N.nvmlDeviceGetClockInfo, h, c)
            d["max_clock_" + k] = q(N.nvmlDeviceGetMaxClockInfo, h, c)
        d["clocks_event_reasons"] = q(getattr(N, "nvmlDeviceGetCurrentClocksEventReasons",
                                              N.nvmlDeviceGetCurrentClocksThrottleReasons), h)
        d["clocks_throttle_reasons"] = q(N.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        d["supported_event_reasons"] = q(N.nvmlDeviceGetSupportedClocksThrottleReasons, h)
        d["temperature"] = q(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU)
        for name in ("SLOWDOWN", "SHUTDOWN", "GPU_MAX", "MEM_MAX"):
            c = getattr(N, "NVML_TEMPERATURE_THRESHOLD_" + name, None)
            if c is not None:
                d["temp_threshold_" + name.lower()] = q(N.nvmlDeviceGetTemperatureThreshold, h, c)
        d["power_mw"] = q(N.nvmlDeviceGetPowerUsage, h)
        d["power_limit_mw"] = q(N.nvmlDeviceGetEnforcedPowerLimit, h)
        d["utilization"] = q(N.nvmlDeviceGetUtilizationRates, h)
        d["ecc_mode"] = q(N.nvmlDeviceGetEccMode, h)
        for et, en in ((N.NVML_MEMORY_ERROR_TYPE_CORRECTED, "corrected"),
                       (N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "uncorrected")):
            d["ecc_volatile_" + en] = q(N.nvmlDeviceGetTotalEccErrors, h, et, N.NVML_VOLATILE_ECC)
            d["ecc_aggregate_" + en] = q(N.nvmlDeviceGetTotalEccErrors, h, et,
                                         N.NVML_AGGREGATE_ECC)
        d["retired_pages_dbe"] = q(lambda: len(N.nvmlDeviceGetRetiredPages(
            h, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)))
        d["retired_pages_pending"] = q(N.nvmlDeviceGetRetiredPagesPendingStatus, h)
        d["remapped_rows"] = q(N.nvmlDeviceGetRemappedRows, h)
        d["pcie_replay"] = q(N.nvmlDeviceGetPcieReplayCounter, h)
        d["pcie_link_gen"] = q(N.nvmlDeviceGetCurrPcieLinkGeneration, h)
        d["pcie_link_width"] = q(N.nvmlDeviceGetCurrPcieLinkWidth, h)
        links = []
        for link in range(18):
            state = q(N.nvmlDeviceGetNvLinkState, h, link)
            if isinstance(state, dict):
                links.append({"link": link, "state": state})
                continue
            e = {"link": link, "state": state}
            for cname in ("REPLAY", "RECOVERY", "CRC_FLIT", "CRC_DATA"):
                c = getattr(N, "NVML_NVLINK_ERROR_DL_" + cname, None)
                if c is not None:
                    e[cname.lower()] = q(N.nvmlDeviceGetNvLinkErrorCounter, h, link, c)
            links.append(e)
        d["nvlink"] = links
        d["persistence"] = q(N.nvmlDeviceGetPersistenceMode, h)
        d["compute_mode"] = q(N.nvmlDeviceGetComputeMode, h)
        out["devices"].append(d)
    N.nvmlShutdown()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
