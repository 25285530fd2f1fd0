/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Intrusive doubly linked lists kept as a (first, last) pair of pointers, over link fields the
 * element type names itself (so one element can sit on several lists: an LRU and a pending
 * queue, say). `first`, `last` and `node` are lvalues evaluated more than once: pass plain
 * variables or member accesses, never expressions with side effects.
 */
#ifndef SYSOM_COMMON_LIST_H
#define SYSOM_COMMON_LIST_H

#include <stddef.h>

/* Takes `node` (on the list) out of it; its links become NULL. */
#define SYSOM_DLIST_UNLINK(first, last, node, prev, next)                                      \
	do {                                                                                   \
		if ((node)->prev)                                                              \
			(node)->prev->next = (node)->next;                                     \
		else                                                                           \
			(first) = (node)->next;                                                \
		if ((node)->next)                                                              \
			(node)->next->prev = (node)->prev;                                     \
		else                                                                           \
			(last) = (node)->prev;                                                 \
		(node)->prev = (node)->next = NULL;                                            \
	} while (0)

/* Puts `node` (on no list) at the front. */
#define SYSOM_DLIST_PUSH_FRONT(first, last, node, prev, next)                                  \
	do {                                                                                   \
		(node)->prev = NULL;                                                           \
		(node)->next = (first);                                                        \
		if (first)                                                                     \
			(first)->prev = (node);                                                \
		else                                                                           \
			(last) = (node);                                                       \
		(first) = (node);                                                              \
	} while (0)

/* Puts `node` (on no list) at the back. */
#define SYSOM_DLIST_PUSH_BACK(first, last, node, prev, next)                                   \
	do {                                                                                   \
		(node)->next = NULL;                                                           \
		(node)->prev = (last);                                                         \
		if (last)                                                                      \
			(last)->next = (node);                                                 \
		else                                                                           \
			(first) = (node);                                                      \
		(last) = (node);                                                               \
	} while (0)

/* For lists kept by their first element only: takes `node` out (links left as they were). */
#define SYSOM_LIST_UNLINK(first, node, prev, next)                                             \
	do {                                                                                   \
		if ((node)->prev)                                                              \
			(node)->prev->next = (node)->next;                                     \
		else                                                                           \
			(first) = (node)->next;                                                \
		if ((node)->next)                                                              \
			(node)->next->prev = (node)->prev;                                     \
	} while (0)

/* For lists kept by their first element only: puts `node` (on no list) at the front. */
#define SYSOM_LIST_PUSH_FRONT(first, node, prev, next)                                         \
	do {                                                                                   \
		(node)->prev = NULL;                                                           \
		(node)->next = (first);                                                        \
		if (first)                                                                     \
			(first)->prev = (node);                                                \
		(first) = (node);                                                              \
	} while (0)

#endif
