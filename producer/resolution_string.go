package producer

import "strconv"

// String is the constant's name ("TransactionCommit"), or
// TransactionResolution(n) for a value that is none of them.
func (r TransactionResolution) String() string {
	switch r {
	case TransactionUnknown:
		return "TransactionUnknown"
	case TransactionCommit:
		return "TransactionCommit"
	case TransactionRollback:
		return "TransactionRollback"
	}
	return "TransactionResolution(" + strconv.Itoa(int(r)) + ")"
}
