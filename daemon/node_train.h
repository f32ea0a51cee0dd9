/* pipeld's side of a training assignment: the schedule its stage runs, built from what the
 * coordinator decided (every stage of the job builds the same lists). */
#ifndef PL_DAEMON_NODE_TRAIN_H
#define PL_DAEMON_NODE_TRAIN_H

#include "common/train_ops.h"
#include "transport/msg.h"

/* The op lists of assignment a (spec.train set): its schedule kind for the split's S stages and
 * global_batch / micro_batch / replicas microbatches, after checking that the job's S x replicas
 * stages are a's n_stages and that a's layer range is its stage's part of the split (stage i is
 * replica i / S's stage i % S). */
pl_status_t pl_node_train_ops(const pl_msg_assign_t *a, pl_train_ops_t **ops_p);

#endif
