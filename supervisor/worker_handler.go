package supervisor

import (
	"github.com/sipvisor/sipvisor/sipworker"
	"github.com/sipvisor/sipvisor/worker"
)

// newWorkerHandler makes the SIP engine of a worker process.
func newWorkerHandler(env *worker.Env) (worker.Handler, error) { return sipworker.New(env) }
