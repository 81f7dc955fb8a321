/* The simulated GPUs through NVML's interface: libnvidia-ml.so.1 for a simulated host, built by
 * orchestrator/sim/nvml.py with the system's C compiler, so the agent's telemetry reads them as
 * it reads a real GPU (energy counter included).
 *
 * What the GPUs do comes from the engines: each simulated engine writes nvml-<pid>.txt in the
 * sandbox's state folder ($ORCH_SIM_STATE) when its running requests change, one line:
 *     <mask of its GPUs> <requests running> <clock-event bits of the night's throttling> <MiB>
 * A file of a process that is gone counts for nothing. The figures (power per request, clocks,
 * the board limit) are gpus.py's, passed at build time as -D definitions.
 *
 * Power is a step function of the requests running; the energy counter integrates it in this
 * process, from nvmlInit on, at every read (a real counter counts from the driver's load: only
 * differences mean anything, as here). */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 16
#define REFRESH_S 0.02 /* the state folder is read at most this often */

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;
typedef void *nvmlDevice_t;

#define MAX_PROCESSES 64

typedef struct {
    long index;
    long running;
    unsigned long long reasons;
    long memory_mib;
    double power_mw;      /* at the last energy update */
    double energy_mj;     /* integrated since nvmlInit, plus a start */
    double updated;       /* monotonic seconds of the last energy update */
    unsigned int pids[MAX_PROCESSES]; /* the live engines on it, and their memory */
    unsigned long long used[MAX_PROCESSES];
    unsigned int processes;
} Gpu;

static Gpu gpus[MAX_GPUS];
static long gpu_count, memory_mib;
static double refreshed = -1.0;
static char state[4096];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double power_of(long running) {
    if (running <= 0) return IDLE_POWER_MW;
    double busy = BUSY_POWER_MW + PER_REQUEST_MW * (double)running;
    return busy < POWER_LIMIT_MW ? busy : POWER_LIMIT_MW;
}

/* a whole number of gpus.json (written by sandbox.py: `"key": 2`), or the environment's
 * variable that overrides it, or ``fallback`` */
static long fact(const char *key, const char *variable, long fallback) {
    const char *env = getenv(variable);
    if (env && *env) return strtol(env, NULL, 10);
    char path[4200];
    snprintf(path, sizeof path, "%s/gpus.json", state);
    FILE *f = fopen(path, "r");
    if (!f) return fallback;
    char text[4096], quoted[64];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(text, quoted);
    return at ? strtol(at + strlen(quoted), NULL, 10) : fallback;
}

static void refresh(void) {
    double t = now_s();
    if (refreshed >= 0 && t - refreshed < REFRESH_S) return;
    refreshed = t;
    for (long i = 0; i < gpu_count; i++) {
        gpus[i].running = 0;
        gpus[i].reasons = 0;
        gpus[i].memory_mib = IDLE_USED_MIB;
        gpus[i].processes = 0;
    }
    DIR *dir = opendir(state);
    if (!dir) return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        long pid;
        char tail[8];
        if (sscanf(entry->d_name, "nvml-%ld.%7s", &pid, tail) != 2 || strcmp(tail, "txt") != 0)
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno != EPERM) continue; /* gone */
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", state, entry->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned long mask = 0, running = 0, memory = 0;
        unsigned long long bits = 0;
        int got = fscanf(f, "%lu %lu %llu %lu", &mask, &running, &bits, &memory);
        fclose(f);
        if (got != 4) continue;
        for (long i = 0; i < gpu_count; i++) {
            if (!(mask & (1UL << i))) continue;
            gpus[i].running += (long)running;
            gpus[i].memory_mib += (long)memory;
            if (running) gpus[i].reasons |= bits;
            if (gpus[i].processes < MAX_PROCESSES) {
                gpus[i].pids[gpus[i].processes] = (unsigned int)pid;
                gpus[i].used[gpus[i].processes++] = (unsigned long long)memory << 20;
            }
        }
    }
    closedir(dir);
}

/* the counter up to now, at the power of the requests running since the last update */
static Gpu *update(nvmlDevice_t device) {
    Gpu *g = (Gpu *)device;
    refresh();
    double t = now_s();
    g->energy_mj += g->power_mw * (t - g->updated);
    g->updated = t;
    g->power_mw = power_of(g->running);
    return g;
}

int nvmlInit_v2(void) {
    const char *dir = getenv("ORCH_SIM_STATE");
    if (!dir || !*dir) return 9; /* NVML_ERROR_DRIVER_NOT_LOADED: not a simulated host */
    snprintf(state, sizeof state, "%s", dir);
    gpu_count = fact("count", "ORCH_SIM_GPUS", 2);
    memory_mib = fact("memory_mib", "ORCH_SIM_GPU_MEMORY_MIB", 49140);
    if (gpu_count < 0) gpu_count = 0;
    if (gpu_count > MAX_GPUS) gpu_count = MAX_GPUS;
    double t = now_s();
    refreshed = -1.0;
    refresh();
    for (long i = 0; i < gpu_count; i++) {
        gpus[i].index = i;
        if (gpus[i].updated == 0.0) { /* once per process: a counter never goes back */
            gpus[i].energy_mj = 1.0e9 * (double)(i + 1); /* "since the driver loaded" */
            gpus[i].updated = t;
            gpus[i].power_mw = power_of(gpus[i].running);
        }
    }
    return 0;
}

int nvmlShutdown(void) { return 0; }

const char *nvmlErrorString(int ret) {
    return ret == 9 ? "Driver Not Loaded" : ret == 2 ? "Invalid Argument" : "Unknown Error";
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if ((long)index >= gpu_count) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *device = &gpus[index];
    return 0;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *mw) {
    *mw = (unsigned int)update(device)->power_mw;
    return 0;
}

int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *mj) {
    *mj = (unsigned long long)update(device)->energy_mj;
    return 0;
}

int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *bits) {
    Gpu *g = update(device);
    *bits = g->running ? g->reasons : 0x1ULL; /* GPU idle */
    return 0;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz) {
    Gpu *g = update(device);
    if (type == 1) /* NVML_CLOCK_SM */
        *mhz = !g->running ? IDLE_SM_MHZ : g->reasons ? THROTTLED_SM_MHZ : BUSY_SM_MHZ;
    else if (type == 2) /* NVML_CLOCK_MEM */
        *mhz = g->running ? BUSY_MEM_MHZ : IDLE_MEM_MHZ;
    else
        return 2;
    return 0;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    Gpu *g = update(device);
    unsigned long long used = (unsigned long long)g->memory_mib;
    unsigned long long total = (unsigned long long)memory_mib;
    memory->total = total << 20;
    memory->used = (used < total ? used : total) << 20;
    memory->free = memory->total - memory->used;
    return 0;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    Gpu *g = update(device);
    util->gpu = g->running ? 97 : 0;
    util->memory = g->running ? 48 : 0;
    return 0;
}

int nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *celsius) {
    Gpu *g = update(device);
    if (sensor != 0) return 2;
    *celsius = g->running ? 61 : 34;
    return 0;
}

/* NVML's two-call protocol: too small a buffer answers INSUFFICIENT_SIZE with the count */
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                            nvmlProcessInfo_t *infos) {
    Gpu *g = update(device);
    if (*count < g->processes || (infos == NULL && g->processes)) {
        *count = g->processes;
        return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    }
    for (unsigned int i = 0; i < g->processes; i++) {
        infos[i].pid = g->pids[i];
        infos[i].usedGpuMemory = g->used[i];
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = g->processes;
    return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *mw) {
    (void)device;
    *mw = (unsigned int)POWER_LIMIT_MW;
    return 0;
}
