/* Every function of the MORI-CCO device API (include/mori/device/cco.cuh) instantiated at every
 * scope, for tests/test_cco_device_compile.sh: a header that does not compile under nvcc (or
 * hipcc) fails there, not in a user's kernel. Not run: the GPU checks run the device API. */
#include "mori/device/cco.cuh"

template <int S> __device__ int all_at(const mori_cco_dev_comm &c, mori_cco_win w)
{
	int rc = 0;
	rc |= mori_cco_gda_put<S>(c, 1, w, 0, w, 64, 64);
	rc |= mori_cco_gda_put_signal_add<S>(c, 1, w, 0, w, 64, 64, 0, 1);
	rc |= mori_cco_gda_get<S>(c, 1, w, 0, w, 64, 64);
	rc |= mori_cco_ce_put<S>(c, 0, w, 0, w, 64, 64, 0);
	rc |= mori_cco_ce_drain<S>(c, 0);
	{
		mori_cco_lsa_barrier_session<S> b(c, 0);
		rc |= b.sync();
	}
	{
		mori_cco_gda_barrier_session<S> b(c, 0, false);
		rc |= b.arrive();
		rc |= b.wait();
	}
	{
		mori_cco_gda_barrier_session<S> b(c, 0, true);
		rc |= b.sync();
	}
	return rc;
}

extern "C" __global__ void cco_every_call(mori_cco_dev_comm c, mori_cco_win w, int *out)
{
	int rc = all_at<MORI_CCO_THREAD>(c, w) | all_at<MORI_CCO_WARP>(c, w) | all_at<MORI_CCO_BLOCK>(c, w);
	uint64_t v = 0;
	rc |= mori_cco_ce_put_grouped(c, threadIdx.x % 2, w, 0, w, 64, 64, threadIdx.x % 2);
	rc |= mori_cco_gda_signal_add(c, 1, 0, 5);
	rc |= mori_cco_gda_signal_inc(c, 1, 0);
	rc |= mori_cco_gda_counter_inc(c, 0);
	rc |= mori_cco_gda_flush(c);
	rc |= mori_cco_gda_read_signal(c, 0, &v);
	rc |= mori_cco_gda_wait_signal(c, 0, 1);
	rc |= mori_cco_gda_reset_signal(c, 0);
	rc |= mori_cco_gda_read_counter(c, 0, &v);
	rc |= mori_cco_gda_wait_counter(c, 0, 1);
	rc |= mori_cco_check(c) | mori_cco_status(c);
	void *p = mori_cco_lsa_peer_ptr(c, w, 0, 0);
	void *l = mori_cco_local_ptr(c, w, 0);
	mori_cco_team t = mori_cco_team_rail(&c);
	rc |= mori_cco_team_to_world(&c, t, 0) + mori_cco_team_to_world(&c, mori_cco_team_cross_node(&c), 0) +
	      mori_cco_team_to_world(&c, mori_cco_team_lsa(&c), 0) + mori_cco_team_world(&c).n_ranks;
	out[threadIdx.x] = rc + (p == l) + (int)v;
}
