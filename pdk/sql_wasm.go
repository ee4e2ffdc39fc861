//go:build wasip1

package pdk

import "github.com/fabric-host/fabric/abi"

//go:wasmimport fabric:host/v1 sql_query
func hostSQLQuery(req uint64) uint64

// SQL runs one sql_query request.
func (wasmHost) SQL(req abi.SQLRequest) (abi.SQLResponse, error) {
	var resp abi.SQLResponse
	err := roundTrip(hostSQLQuery, &req, &resp)
	return resp, err
}
