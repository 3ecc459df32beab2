package location

// Change is what one REGISTER asks of the bindings of one AOR.
type Change struct {
	AOR string
	// RemoveAll drops every binding of AOR (Contact: *); nothing is listed
	// after it.
	RemoveAll bool
	// Bindings are saved in order, each as Save saves it: one whose
	// Expires is not after now removes its contact instead.
	Bindings []Binding
}

// Batcher is a Store that applies the changes of several REGISTERs in one
// step, all or none: for SQLite one transaction, which takes the file's
// locks and writes the log once for them all.
type Batcher interface {
	// Apply applies changes in order and returns, for each, the live
	// bindings of its AOR right after it, newest first (nil after
	// RemoveAll): what its 200 OK lists, which is all they need hold
	// (AOR, Contact and Expires). On an error none was applied.
	Apply(changes []Change) ([][]Binding, error)
}

// Apply applies changes to st in order. A Batcher does them in one step;
// any other store one call at a time, stopping at the first that fails:
// the result then holds the changes applied before it, and err says why
// the next failed.
func Apply(st Store, changes []Change) ([][]Binding, error) {
	if b, ok := st.(Batcher); ok {
		return b.Apply(changes)
	}
	return applyEach(st, changes)
}

func applyEach(st Store, changes []Change) ([][]Binding, error) {
	out := make([][]Binding, 0, len(changes))
	for _, ch := range changes {
		bs, err := applyOne(st, ch)
		if err != nil {
			return out, err
		}
		out = append(out, bs)
	}
	return out, nil
}

// applyOne is a REGISTER's change in as few calls as the Store interface
// allows: each save brings back the bindings to list, so a lookup is only
// needed when nothing was saved.
func applyOne(st Store, ch Change) ([]Binding, error) {
	if ch.AOR == "" {
		return nil, ErrEmptyAOR
	}
	if ch.RemoveAll {
		if err := st.Remove(ch.AOR, ""); err != nil {
			return nil, err
		}
	}
	var (
		bs  []Binding
		err error
	)
	for _, b := range ch.Bindings {
		if bs, err = st.Register(ch.AOR, b); err != nil {
			return nil, err
		}
	}
	if len(ch.Bindings) == 0 && !ch.RemoveAll {
		return st.Lookup(ch.AOR)
	}
	return bs, nil
}

// A Copier is a Batcher that keeps none of the strings of the changes it
// is handed once Apply returns, so that they may alias a buffer its caller
// reuses after it has read Apply's result, whose bindings may hold them.
type Copier interface {
	Batcher
	// CopiesChanges marks the store as a Copier.
	CopiesChanges()
}

// CopiesChanges reports whether st is a Copier.
func CopiesChanges(st Store) bool {
	if g, ok := st.(*guarded); ok {
		st = g.Store
	}
	_, ok := st.(Copier)
	return ok
}
