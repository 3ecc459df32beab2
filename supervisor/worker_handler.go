package supervisor

import (
	"errors"

	"github.com/sipvisor/sipvisor/pool"
)

// newWorkerHandler makes the SIP engine of a worker process.
func newWorkerHandler(env *pool.Env) (pool.Handler, error) {
	return nil, errors.New("the SIP engine is not part of this build")
}
