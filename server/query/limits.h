/* SPDX-License-Identifier: Apache-2.0 */
/* Bounds on what one query reads from the store, shared by the API's views and the analysis. */
#ifndef SYSOM_SERVER_QUERY_LIMITS_H
#define SYSOM_SERVER_QUERY_LIMITS_H

#define QUERY_DEFAULT_RANGE_MS (3600 * 1000)  /* from/to default: the last hour */
#define QUERY_DEFAULT_STACK_LIMIT 10000       /* stacks per profile unless a query says */
#define QUERY_MAX_JOB_ROWS 100000         /* ranks, and (process, communicator) rows, per job */
#define QUERY_MAX_STRAGGLER_INSTANCES 20000 /* latest instances read per stragglers answer */
#define QUERY_MAX_STRAGGLER_CELLS (1u << 23) /* window x ranks lateness values over all groups */
#define QUERY_STRAGGLER_TOP_RANKS 16       /* ranks listed per group (most excess first) */
#define QUERY_MAX_GPU_ROWS 500000        /* stored rows of each GPU kind read by one gpu answer */

#endif
