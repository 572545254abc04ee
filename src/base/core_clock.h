/*
 * How fast the calling thread's core runs right now: a chain of dependent
 * register adds (one add's latency is one cycle on every x86-64 and arm64
 * core; not add-immediates, which newer Intel cores fold at rename), timed
 * by the wall clock. On a quiet machine this is the core's clock; on a
 * shared VM it drops when the host's other tenants take the core or its SMT
 * sibling (seen: 1.1-2.2 "GHz" minute to minute on a Xeon whose quiet
 * figure is ~3.7), so a benchmark that prints it beside its figures says
 * what state the machine was in (kvstitch bench through kvs_core_clock_ghz,
 * bench/roofline_probe per thread through kvs_add_chain).
 */
#ifndef KVS_BASE_CORE_CLOCK_H
#define KVS_BASE_CORE_CLOCK_H

#include <stdint.h>

/* Dependent adds per iteration of kvs_add_chain. */
#define KVS_ADD_CHAIN_ADDS 8

/* n iterations of KVS_ADD_CHAIN_ADDS dependent adds; returns the sum (so
 * nothing is optimized away). 0 on a CPU without the inline asm (then
 * kvs_core_clock_ghz says 0: unknown). */
uint64_t kvs_add_chain(uint64_t n);

/* kvs_core_clock_ghz (include/kvstitch.h) is built on kvs_add_chain. */

/* Milliseconds on CLOCK_MONOTONIC: the clock every timing of the library
 * reads (request timings, the load's far-prefetch check, the core clock). */
double kvs_now_ms(void);

#endif
