// The copy service: one block of libmori's on the GPU while small batches keep coming
// (libclient/gpu_service.c posts them into pinned host memory, kernels/mori_copy.h has the
// layout). Thread 0 waits for the next job's slot, the block copies it (512-byte pieces dealt to
// the warps in turn), thread 0 publishes `done`. It leaves on `stop`, or after idle_ns without
// a job: it clears `running`, then looks once more, so a job posted meanwhile is either taken
// or seen by the host (running 0, done short of it), which launches it again.
#include "mori/device/prims.cuh"
#include "mori_copy.h"

enum { SERVICE_LEAVE, SERVICE_LINE, SERVICE_FULL };

// Warp 0: one read of job `next`'s line words a poll (kernels/mori_copy.h). SERVICE_LINE: a
// one-descriptor job, lane k holding its word k's payload in *word; SERVICE_FULL: read the
// slot; SERVICE_LEAVE: `stop`, or idle_ns without a job (`running` cleared, one last look).
MORI_DEVICE int service_wait(struct mori_copy_service *sv, uint64_t next, uint64_t since, uint32_t *word)
{
	const unsigned lane = mori_lane();
	const volatile uint64_t *line = sv->slot[next % MORI_COPY_SERVICE_SLOTS].line;
	const uint32_t tag = (uint32_t)next;
	int last = 0;
	for (unsigned polls = 0;; polls++) {
		uint64_t v = lane < MORI_COPY_JOB_LINE ? mori_relaxed_load_sys(&line[lane]) : (uint64_t)tag << 32;
		*word = (uint32_t)v;
		const bool mine = (uint32_t)(v >> 32) == tag;
		if (mori_warp_bcast(mine && *word == MORI_COPY_JOB_FULL, 0))
			return SERVICE_FULL; // a full job writes line[0] only
		if (mori_warp_all(mine))
			return SERVICE_LINE;
		if (last)
			return SERVICE_LEAVE;
		int leave = 0;
		if (lane == 0 && polls % 32 == 31)
			leave = mori_relaxed_load_sys(&sv->stop) != 0;
		if (mori_warp_bcast(leave, 0))
			return SERVICE_LEAVE;
		if (mori_now_ns() - since > sv->idle_ns) {
			if (lane == 0) {
				mori_release_store_sys(&sv->running, 0u);
				__threadfence_system();
			}
			mori_sync_warp();
			last = 1; // one more look: a job posted meanwhile keeps the block
		}
	}
}

MORI_KERNEL void __launch_bounds__(MORI_COPY_BLOCK_THREADS) mori_copy_service(uint64_t service)
{
	struct mori_copy_service *sv = reinterpret_cast<struct mori_copy_service *>(service);
	__shared__ struct mori_copy_job job;
	__shared__ int cmd;
	__shared__ uint32_t words[MORI_COPY_JOB_LINE];
	const unsigned lane = mori_lane(), wpb = blockDim.x / MORI_WARP_SIZE, w = threadIdx.x / MORI_WARP_SIZE;
	uint64_t next = mori_relaxed_load_sys(&sv->done) + 1, since = mori_now_ns();
	if (threadIdx.x == 0) // here now: the host need not queue another (a block before us cleared it)
		mori_release_store_sys(&sv->running, 1u);
	for (;;) {
		if (w == 0) {
			uint32_t word;
			int r = service_wait(sv, next, since, &word);
			if (lane < MORI_COPY_JOB_LINE)
				words[lane] = word;
			if (lane == 0) {
				cmd = r;
				if (r != SERVICE_LEAVE && mori_now_ns() - since > sv->idle_ns)
					mori_release_store_sys(&sv->running, 1u); // its last look found one: stays
			}
		}
		__syncthreads();
		if (cmd == SERVICE_LEAVE)
			return;
		struct mori_copy_job *slot = &sv->slot[next % MORI_COPY_SERVICE_SLOTS];
		if (cmd == SERVICE_LINE) {
			if (threadIdx.x == 0) {
				job.a_base = (uint64_t)words[1] << 32 | words[0];
				job.b_base = (uint64_t)words[3] << 32 | words[2];
				job.n = 1;
				job.swap = 0;
				job.d[0] = {0, 0, words[4]};
			}
		} else {
			if (threadIdx.x == 0)
				while (mori_acquire_load_sys(&slot->seq) != next) // written before line[0]
					;
			__syncthreads();
			const volatile uint64_t *src = reinterpret_cast<const volatile uint64_t *>(&slot->a_base);
			const unsigned words64 = (sizeof(job) - offsetof(struct mori_copy_job, a_base)) / 8;
			if (threadIdx.x < words64)
				(&job.a_base)[threadIdx.x] = src[threadIdx.x];
		}
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
				mori_copy_bytes<MORI_COPY_STREAM>(db + dof + at, sb + so + at,
								  left < MORI_COPY_SERVICE_PIECE ? left : MORI_COPY_SERVICE_PIECE, lane,
								  MORI_WARP_SIZE);
			}
			piece += pieces;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
			mori_fence_data_before_host_signal();
			mori_release_store_sys(&sv->done, next);
		}
		next++;
		since = mori_now_ns();
	}
}
