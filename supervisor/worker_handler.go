package supervisor

import (
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/sipworker"
)

// newWorkerHandler makes the SIP engine of a worker process.
func newWorkerHandler(env *pool.Env) (pool.Handler, error) { return sipworker.New(env) }
