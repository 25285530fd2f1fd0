/* SPDX-License-Identifier: Apache-2.0 */
/* Behaviour-pattern localisation on synthetic patterns (server/analysis/patterns.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/analysis/patterns.h"

static double uniform01(uint64_t *st)
{
	*st = *st * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(*st >> 11) + 0.5) / 9007199254740992.0;
}

static double normal(uint64_t *st)
{
	return sqrt(-2 * log(uniform01(st))) * cos(2 * M_PI * uniform01(st));
}

struct vecs {
	double beta[1000], mu[1000], cov[1000], scratch[2000];
};

/* n workers with β ≈ beta (2% relative noise), μ ≈ mu_ns (2%), CoV ≈ 0.05. */
static void fill(struct vecs *v, size_t n, double beta, double mu_ns, uint64_t seed)
{
	uint64_t st = seed;

	for (size_t w = 0; w < n; w++) {
		v->beta[w] = beta * (1 + 0.02 * normal(&st));
		v->mu[w] = mu_ns * (1 + 0.02 * normal(&st));
		v->cov[w] = 0.05 + 0.005 * normal(&st);
	}
}

/* One rank whose kernel takes 3x as long: named first, in μ or β, with the largest cost. */
static void test_one_slow_kernel(void **state)
{
	static struct vecs v;
	struct patterns_params p;
	struct patterns_top top;
	struct patterns_summary s;

	(void)state;
	patterns_params_default(&p);
	fill(&v, 16, 0.30, 3e6, 1);
	v.mu[4] = 9e6;
	v.beta[4] = 0.60;
	assert_int_equal(patterns_top_init(&top, 10), 0);
	struct patterns_vectors pv = { .beta = v.beta, .mu = v.mu, .cov = v.cov, .n = 16 };
	assert_int_equal(patterns_localise(&pv, 7, &p, v.scratch, &top, &s), 1);
	patterns_top_sort(&top);
	assert_int_equal(top.n, 1);
	assert_int_equal(top.f[0].worker, 4);
	assert_int_equal(top.f[0].function, 7);
	assert_true(top.f[0].z > p.k);
	assert_true(top.f[0].cost > 0.25);
	assert_true(fabs(s.mu - 3e6) < 0.1e6 && fabs(s.beta - 0.30) < 0.02);
	assert_int_equal(s.workers, 16);
	patterns_top_free(&top);
}

/* Healthy noise (2%) over 1,000 workers, many seeds: nobody; nor a rank 3% off (under the 5%
 * relative floor). */
static void test_healthy_noise(void **state)
{
	static struct vecs v;
	struct patterns_params p;
	struct patterns_top top;

	(void)state;
	patterns_params_default(&p);
	assert_int_equal(patterns_top_init(&top, 10), 0);
	for (uint64_t seed = 1; seed <= 20; seed++) {
		fill(&v, 1000, 0.2, 1e6, seed);
		v.mu[10] = 1.03e6;
		struct patterns_vectors pv = { .beta = v.beta, .mu = v.mu, .cov = v.cov, .n = 1000 };
		assert_int_equal(patterns_localise(&pv, 0, &p, v.scratch, &top, NULL), 0);
	}
	assert_int_equal(top.total, 0);
	patterns_top_free(&top);
}

/* The straggler in a collective spends less time in it (the others wait for it): found, below
 * the median, and explained that way round. */
static void test_collective_lower_share(void **state)
{
	static struct vecs v;
	struct patterns_params p;
	struct patterns_top top;

	(void)state;
	patterns_params_default(&p);
	fill(&v, 8, 0.25, 2.5e6, 3);
	v.beta[5] = 0.02;
	v.mu[5] = 0.2e6;
	assert_int_equal(patterns_top_init(&top, 4), 0);
	struct patterns_vectors pv = { .beta = v.beta, .mu = v.mu, .cov = v.cov, .n = 8 };
	assert_int_equal(patterns_localise(&pv, 1, &p, v.scratch, &top, NULL), 1);
	assert_int_equal(top.f[0].worker, 5);
	assert_true(top.f[0].z < -p.k);
	patterns_top_free(&top);
}

/* A function under 1% of the iteration everywhere does not matter, however odd one rank is;
 * absent workers (μ NaN, β 0) do not move the medians. */
static void test_min_beta_and_absent(void **state)
{
	static struct vecs v;
	struct patterns_params p;
	struct patterns_top top;
	struct patterns_summary s;

	(void)state;
	patterns_params_default(&p);
	fill(&v, 32, 0.002, 1e5, 4);
	v.mu[3] = 1e7;
	assert_int_equal(patterns_top_init(&top, 4), 0);
	struct patterns_vectors pv = { .beta = v.beta, .mu = v.mu, .cov = v.cov, .n = 32 };
	assert_int_equal(patterns_localise(&pv, 2, &p, v.scratch, &top, NULL), 0);
	fill(&v, 32, 0.2, 1e6, 5);
	for (size_t w = 16; w < 32; w++) { /* half the workers never ran it */
		v.beta[w] = 0;
		v.mu[w] = v.cov[w] = NAN;
	}
	patterns_localise(&pv, 2, &p, v.scratch, &top, &s);
	assert_true(fabs(s.mu - 1e6) < 0.05e6);
	assert_int_equal(s.workers, 16);
	patterns_top_free(&top);
}

/* 1,000 workers of which 100 abnormal with growing deviation, a top list of 10: the ten
 * largest costs, in order, and the total counted. */
static void test_bounded_top(void **state)
{
	static struct vecs v;
	struct patterns_params p;
	struct patterns_top top;

	(void)state;
	patterns_params_default(&p);
	fill(&v, 1000, 0.1, 1e6, 6);
	for (int i = 0; i < 100; i++)
		v.beta[i * 10] = 0.2 + 0.001 * i;
	assert_int_equal(patterns_top_init(&top, 10), 0);
	struct patterns_vectors pv = { .beta = v.beta, .mu = v.mu, .cov = v.cov, .n = 1000 };
	assert_int_equal(patterns_localise(&pv, 0, &p, v.scratch, &top, NULL), 100);
	patterns_top_sort(&top);
	assert_int_equal(top.total, 100);
	assert_int_equal(top.n, 10);
	for (int i = 0; i < 10; i++)
		assert_int_equal(top.f[i].worker, (99 - i) * 10);
	patterns_top_free(&top);
}

/* Sampled CPU shares: a rank whose share differs by what 60 samples' noise gives is not
 * abnormal once its standard error floors the scale; without it, it would be. */
static void test_sampling_error(void **state)
{
	static struct vecs v;
	static double se[16];
	struct patterns_params p;
	struct patterns_top top;

	(void)state;
	patterns_params_default(&p);
	fill(&v, 16, 0.30, 1e6, 8);
	v.beta[2] = 0.45; /* 60 samples: σ of a 0.3 share is 0.059, this is 2.5 of them */
	for (int w = 0; w < 16; w++)
		se[w] = sqrt(v.beta[w] * (1 - v.beta[w]) / 60);
	assert_int_equal(patterns_top_init(&top, 4), 0);
	struct patterns_vectors pv = { .beta = v.beta, .n = 16 };
	assert_int_equal(patterns_localise(&pv, 0, &p, v.scratch, &top, NULL), 1);
	pv.beta_se = se;
	assert_int_equal(patterns_localise(&pv, 0, &p, v.scratch, &top, NULL), 0);
	patterns_top_free(&top);
}

/* The key CPU function of a folded stack: the innermost Python frame, else the leaf. */
static void expect_fn(const char *stack, const char *want)
{
	char out[PATTERNS_CPU_NAME_MAX];
	size_t n = patterns_cpu_function(stack, strlen(stack), out, sizeof(out));

	assert_string_equal(out, want);
	assert_int_equal(n, strlen(want));
}

static void test_cpu_function(void **state)
{
	(void)state;
	/* Native: the leaf. */
	expect_fn("simjob;main;rank_main;simjob_fault_extra_cpu", "simjob_fault_extra_cpu");
	expect_fn("app;main;std::vector<int, std::allocator<int> >::push_back(int const&)",
		  "std::vector<int, std::allocator<int> >::push_back(int const&)");
	/* Python over the interpreter: the innermost Python function, lines merged. */
	expect_fn("python3.11;_start;Py_RunMain;<module> (train.py:88);train_step (train.py:53);"
		  "slow_rank_work (train.py:44);_PyEval_EvalFrameDefault;python3.11+0x1234",
		  "slow_rank_work (train.py)");
	expect_fn("python3.11;<module> (train.py:88);train_step (train.py:51)",
		  "train_step (train.py)");
	/* Python calling into libtorch: the Python caller. */
	expect_fn("python3.11;train_step (ddp.py:53);Tensor.backward (_tensor.py:488);"
		  "backward (__init__.py:197);PyObject_Vectorcall;"
		  "torch::autograd::Engine::execute(std::vector<torch::autograd::Edge> const&);sgemm_",
		  "backward (__init__.py)");
	/* Other spellings the symbolizer writes: no line, a pseudo-file, only a line. */
	expect_fn("python3;main (app.py);f (app.py)", "f (app.py)");
	expect_fn("python3;<module> (<string>:1)", "<module> (<string>)");
	expect_fn("python3;f (line 12);memcpy", "f");
	/* Not Python: parentheses that are no file and line. */
	expect_fn("app;main;foo (int)", "foo (int)");
	expect_fn("app;main;(anonymous namespace)::run()", "(anonymous namespace)::run()");
	expect_fn("app;main;f (x.py:12a)", "f (x.py:12a)");
	expect_fn("app;main;f (:12)", "f (:12)");
	/* None: the comm alone, a kernel leaf, nothing. */
	expect_fn("python3.11", "");
	expect_fn("python3.11;f (a.py:1);schedule_[k]", "");
	expect_fn("", "");
	/* Cut to fit, NUL-terminated. */
	char small[8];
	assert_int_equal(patterns_cpu_function("app;main;a_long_function_name", 28, small,
					       sizeof(small)), 7);
	assert_string_equal(small, "a_long_");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_slow_kernel),
		cmocka_unit_test(test_healthy_noise),
		cmocka_unit_test(test_collective_lower_share),
		cmocka_unit_test(test_min_beta_and_absent),
		cmocka_unit_test(test_bounded_top),
		cmocka_unit_test(test_sampling_error),
		cmocka_unit_test(test_cpu_function),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
