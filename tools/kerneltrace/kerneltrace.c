// kerneltrace is a CUDA injection library that writes, for every kernel
// the process runs (the kernel nodes of CUDA graph replays included), one
// CSV line: start and end in ns on the GPU's clock, the correlation id of
// the launch (one cuGraphLaunch's kernels share it), the grid and block,
// and the kernel's name. It is what Nsight Systems' timeline gives, for a
// machine without Nsight Systems: Reel's decode replays overlap their
// kernels (programmatic dependent launch), so a kernel's cost in a token
// is the time its end adds after the end before it, which only a timeline
// shows. summarize.py turns the file into per-kernel tables.
//
// Build on the device and run any CUDA program under it (trace.sh does both):
//
//	gcc -O2 -shared -fPIC -I$CUDA/include -I$CUPTI/include kerneltrace.c \
//	    -L$CUPTI/lib64 -lcupti -lpthread -o libkerneltrace.so
//	CUDA_INJECTION64_PATH=$PWD/libkerneltrace.so KERNELTRACE_OUT=k.csv reel bench ...
//
// Records reach the file when a thread of the library flushes CUPTI's
// buffers (every 20 ms) and when a context is destroyed: the last few
// milliseconds of a run may be missing.
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if CUPTI_API_VERSION >= 130200
typedef CUpti_ActivityKernel11 kernel_record;
#elif CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 kernel_record;
#else
typedef CUpti_ActivityKernel9 kernel_record;
#endif

#define BUFFER_BYTES (1u << 20)

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
	*buffer = aligned_alloc(8, BUFFER_BYTES);
	*size = *buffer ? BUFFER_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
	(void)ctx, (void)stream, (void)size;
	CUpti_Activity *r = NULL;
	pthread_mutex_lock(&out_lock);
	while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && r->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
		const kernel_record *k = (const kernel_record *)r;
		fprintf(out, "%llu,%llu,%u,%d,%d,%d,%d,%s\n", (unsigned long long)k->start, (unsigned long long)k->end, k->correlationId,
		        k->gridX, k->gridY, k->gridZ, k->blockX, k->name ? k->name : "?");
	}
	fflush(out);
	pthread_mutex_unlock(&out_lock);
	free(buffer);
}

// on_resource flushes every record before a context goes away.
static void CUPTIAPI on_resource(void *data, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void *info) {
	(void)data, (void)info;
	if (domain == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

// flusher hands CUPTI's buffers over every 20 ms, full or not: a Go
// program exits without libc's atexit, so nothing else would.
static void *flusher(void *arg) {
	(void)arg;
	for (;;) {
		usleep(20000);
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	}
	return NULL;
}

// InitializeInjection is what the CUDA driver calls in a library named by
// CUDA_INJECTION64_PATH, once, at cuInit.
int InitializeInjection(void) {
	const char *path = getenv("KERNELTRACE_OUT");
	out = fopen(path && *path ? path : "kerneltrace.csv", "w");
	if (!out) {
		perror("kerneltrace: open the output");
		return 0;
	}
	fprintf(out, "start,end,correlation,grid_x,grid_y,grid_z,block_x,name\n");
	CUpti_SubscriberHandle sub;
	if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_resource, NULL) == CUPTI_SUCCESS)
		cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE);
	if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
		fprintf(stderr, "kerneltrace: CUPTI refused kernel activity\n");
		return 0;
	}
	fflush(out);
	pthread_t t;
	pthread_create(&t, NULL, flusher, NULL);
	return 1;
}
