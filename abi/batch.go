package abi

import (
	"errors"

	"github.com/fabric-host/fabric/internal/errtext"
	"github.com/fabric-host/fabric/model"
)

// ExportScanBatch is the optional export that scans several partitions in
// one call (ABI 1.2). A plugin built with the pdk has it; the host uses it
// when present and falls back to one fabric_scan per partition otherwise.
// Extism's own call sequence costs tens of microseconds, so one call for a
// chunk of partitions instead of one each is most of an idle sweep's cost.
const ExportScanBatch = "fabric_scan_batch"

// MaxBatchPartitions bounds ScanBatchRequest.Indexes.
const MaxBatchPartitions = 1024

// PartitionWholeBatch is the index a fabric_scan_batch call passes to the
// partition host function (FnPartition) to act for every partition of its
// batch at once: each key of the following host calls must then be on one
// of the batch's partitions (any of them), so one pipelined read or FCALL
// batch can serve all the partitions. A host that predates it answers
// -CodeCrossPartition and leaves the selection where it was; the plugin
// then scans the partitions one by one.
const PartitionWholeBatch = 1 << 16

const (
	tagScanBatchRequest = 0xA3
	tagScanBatchResult  = 0xA4
)

// ScanBatchRequest is the input of fabric_scan_batch: scan each partition
// of Indexes once, in order. Every partition's scan sees the ScanRequest
// that Request returns, as if it had been called alone. Before each one the
// plugin selects the partition with the partition host function (FnPartition),
// so its host calls are checked against that partition as in fabric_scan.
type ScanBatchRequest struct {
	// Cycle is the sweep number.
	Cycle uint64
	// Family is the partitions' family; Partitions its partition count.
	Family     model.Family
	Partitions uint16
	// Indexes are the partitions to scan, at most MaxBatchPartitions.
	Indexes []uint16
	// BatchSize is the most items to act on per partition.
	BatchSize uint32
	// DeadlineMs is the whole call's budget in milliseconds.
	DeadlineMs uint32
}

// Request returns the ScanRequest of the i-th partition of the batch.
func (r *ScanBatchRequest) Request(i int) ScanRequest {
	return ScanRequest{Cycle: r.Cycle, Partition: model.Partition{Family: r.Family, Index: r.Indexes[i]},
		Partitions: r.Partitions, BatchSize: r.BatchSize, DeadlineMs: r.DeadlineMs}
}

// MarshalBinary encodes the request.
func (r *ScanBatchRequest) MarshalBinary() ([]byte, error) {
	if len(r.Indexes) > MaxBatchPartitions {
		return nil, errors.New("scan batch request: " + errtext.D(len(r.Indexes)) + " partitions, above " + errtext.D(MaxBatchPartitions))
	}
	e := NewEncoder(make([]byte, 0, 16+3*len(r.Indexes)))
	e.Byte(tagScanBatchRequest)
	e.Uvarint(r.Cycle)
	e.Byte(byte(r.Family))
	e.Uvarint(uint64(r.Partitions))
	e.Uvarint(uint64(len(r.Indexes)))
	for _, i := range r.Indexes {
		e.Uvarint(uint64(i))
	}
	e.Uvarint(uint64(r.BatchSize))
	e.Uvarint(uint64(r.DeadlineMs))
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a request.
func (r *ScanBatchRequest) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagScanBatchRequest, "scan batch request"); err != nil {
		return err
	}
	var out ScanBatchRequest
	out.Cycle = d.Uvarint()
	out.Family = model.Family(d.Byte())
	parts := d.Uvarint()
	n := d.Uvarint()
	if d.Err() == nil && (n > MaxBatchPartitions || n > uint64(d.Remaining())) {
		return errtext.Wrap(ErrDecode, "scan batch request: "+ErrDecode.Error()+": "+errtext.U(n)+" partitions")
	}
	out.Indexes = make([]uint16, 0, n)
	for range n {
		idx := d.Uvarint()
		if idx >= parts || idx > 0xffff {
			return errtext.Wrap(ErrDecode, "scan batch request: "+ErrDecode.Error()+": partition "+errtext.U(idx)+" of "+errtext.U(parts))
		}
		out.Indexes = append(out.Indexes, uint16(idx))
	}
	out.BatchSize = d.Uint32()
	out.DeadlineMs = d.Uint32()
	if err := d.Finish("scan batch request"); err != nil {
		return err
	}
	if parts > 0xffff {
		return errtext.Wrap(ErrDecode, "scan batch request: "+ErrDecode.Error()+": "+errtext.U(parts)+" partitions in the family")
	}
	out.Partitions = uint16(parts)
	*r = out
	return nil
}

// ScanBatchResult is the output of fabric_scan_batch: one ScanResult per
// partition of the request, in its order.
type ScanBatchResult struct {
	Results []ScanResult
}

// MarshalBinary encodes the result.
func (r *ScanBatchResult) MarshalBinary() ([]byte, error) {
	e := NewEncoder(make([]byte, 0, 4+12*len(r.Results)))
	e.Byte(tagScanBatchResult)
	e.Uvarint(uint64(len(r.Results)))
	for i := range r.Results {
		r.Results[i].appendFields(e)
	}
	return e.Bytes(), nil
}

// UnmarshalBinary decodes a result; any trailing byte is an error.
func (r *ScanBatchResult) UnmarshalBinary(b []byte) error {
	d := NewDecoder(b)
	if err := expectTag(d, tagScanBatchResult, "scan batch result"); err != nil {
		return err
	}
	n := d.Uvarint()
	if d.Err() == nil && (n > MaxBatchPartitions || n > uint64(d.Remaining())) {
		return errtext.Wrap(ErrDecode, "scan batch result: "+ErrDecode.Error()+": "+errtext.U(n)+" results")
	}
	out := ScanBatchResult{Results: make([]ScanResult, 0, n)}
	for range n {
		var s ScanResult
		s.decodeFields(d)
		out.Results = append(out.Results, s)
	}
	if err := d.Finish("scan batch result"); err != nil {
		return err
	}
	*r = out
	return nil
}
