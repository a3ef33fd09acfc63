// The copy service: one block of libmori's on the GPU while small batches keep coming
// (libclient/gpu_service.c posts them into pinned host memory, kernels/mori_copy.h has the
// layout). Thread 0 waits for the next job's slot, the block copies it (512-byte pieces dealt to
// the warps in turn), thread 0 publishes `done`. It leaves on `stop`, or after idle_ns without
// a job: it clears `running`, then looks once more, so a job posted meanwhile is either taken
// or seen by the host (running 0, done short of it), which launches it again.
#include "mori_gpu.h"
#include "mori_copy.h"

MORI_DEVICE uint64_t service_now_ns(void)
{
#ifdef MORI_HIP
	return wall_clock64() * 10; // the 100 MHz constant clock of gfx9 parts
#else
	uint64_t t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#endif
}

enum { SERVICE_WAIT, SERVICE_JOB, SERVICE_LEAVE };

// Thread 0: wait for job `next` in its slot (SERVICE_JOB), `stop`, or the idle limit (LEAVE).
MORI_DEVICE int service_wait(struct mori_copy_service *sv, uint64_t next, uint64_t since)
{
	const uint64_t *seq = &sv->slot[next % MORI_COPY_SERVICE_SLOTS].seq;
	for (unsigned polls = 0;; polls++) {
		if (mori_acquire_load_sys(seq) == next) // one PCIe read a poll: it is the latency
			return SERVICE_JOB;
		if (polls % 32 == 31 && mori_relaxed_load_sys(&sv->stop))
			return SERVICE_LEAVE;
		if (service_now_ns() - since > sv->idle_ns) {
			mori_release_store_sys(&sv->running, 0u);
			__threadfence_system();
			if (mori_acquire_load_sys(seq) != next)
				return SERVICE_LEAVE;
			mori_release_store_sys(&sv->running, 1u); // it came meanwhile: stay
			return SERVICE_JOB;
		}
	}
}

MORI_KERNEL void __launch_bounds__(MORI_COPY_BLOCK_THREADS) mori_copy_service(uint64_t service)
{
	struct mori_copy_service *sv = reinterpret_cast<struct mori_copy_service *>(service);
	__shared__ struct mori_copy_job job;
	__shared__ int cmd;
	const unsigned lane = mori_lane(), wpb = blockDim.x / MORI_WARP_SIZE, w = threadIdx.x / MORI_WARP_SIZE;
	uint64_t next = mori_relaxed_load_sys(&sv->done) + 1, since = service_now_ns();
	for (;;) {
		if (threadIdx.x == 0)
			cmd = service_wait(sv, next, since);
		__syncthreads();
		if (cmd == SERVICE_LEAVE)
			return;
		const volatile uint64_t *src = reinterpret_cast<const volatile uint64_t *>(&sv->slot[next % MORI_COPY_SERVICE_SLOTS]);
		if (threadIdx.x < sizeof(job) / 8)
			reinterpret_cast<uint64_t *>(&job)[threadIdx.x] = src[threadIdx.x];
		__syncthreads();
		const uint8_t *sb = reinterpret_cast<const uint8_t *>(job.swap ? job.b_base : job.a_base);
		uint8_t *db = reinterpret_cast<uint8_t *>(job.swap ? job.a_base : job.b_base);
		uint64_t piece = 0; // pieces of all descriptors, numbered in order, dealt round robin
		for (uint32_t i = 0; i < job.n && i < MORI_COPY_INLINE; i++) {
			const struct mori_copy_desc &d = job.d[i];
			uint64_t so = job.swap ? d.b_off : d.a_off, dof = job.swap ? d.a_off : d.b_off;
			uint64_t pieces = (d.len + MORI_COPY_SERVICE_PIECE - 1) / MORI_COPY_SERVICE_PIECE;
			for (uint64_t p = (w + wpb - piece % wpb) % wpb; p < pieces; p += wpb) {
				uint64_t at = p * MORI_COPY_SERVICE_PIECE, left = d.len - at;
				copy_piece(db + dof + at, sb + so + at, left < MORI_COPY_SERVICE_PIECE ? left : MORI_COPY_SERVICE_PIECE, lane);
			}
			piece += pieces;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			mori_fence_data_before_host_signal();
			mori_release_store_sys(&sv->done, next);
		}
		next++;
		since = service_now_ns();
	}
}
