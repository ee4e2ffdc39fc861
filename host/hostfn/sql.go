package hostfn

import (
	"context"

	"github.com/fabric-host/fabric/abi"
)

// sqlHandler reserves sql_query: the grant is checked like any other
// capability, then the call answers CodeUnavailable until the Postgres
// backend provides named statements.
func sqlHandler() handler {
	return handler{
		decode: func(in []byte) (any, subjects, error) {
			d := abi.NewDecoder(in)
			name := d.String()
			if err := d.Err(); err != nil {
				return nil, subjects{}, err
			}
			return name, subjects{sql: []string{name}}, nil
		},
		run: func(context.Context, *Caller, any) ([]byte, error) {
			return nil, abi.Errorf(abi.CodeUnavailable, "sql host functions arrive with the Postgres backend")
		},
	}
}
