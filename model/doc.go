// Package model is FlowFabric's data model as fabric sees it: partition
// families and hash tags, identifiers, key names and state enums.
//
// It is pure Go with no dependencies outside the standard library so that it
// compiles both for the host and for GOOS=wasip1 plugins. Every key fabric
// reads or writes is built here, byte-identical to FlowFabric's own builders,
// so that a FlowFabric deployment and fabric share one keyspace.
package model
