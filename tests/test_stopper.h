/* A should_stop poll for tests (kvs_context_params.should_stop): counts
 * its polls and stops from poll stop_at on (0: never). */
#ifndef KT_STOPPER_H
#define KT_STOPPER_H

typedef struct kt_stopper {
    int polls, stop_at;
} kt_stopper;

static inline int kt_stop_at_poll(void *user) {
    kt_stopper *s = user;
    s->polls++;
    return s->stop_at && s->polls >= s->stop_at;
}

#endif
