package rmqerr_test

import (
	"errors"
	"fmt"

	"github.com/twinmq/twinmq/rmqerr"
)

// A send's error tells a refusal by its code, and every failure by its
// class.
func Example() {
	// What a producer returns when the broker refuses a FIFO message on a
	// topic of normal messages, say.
	err := fmt.Errorf(`producer: send to topic "orders" failed after 1 attempt: %w`, &rmqerr.Error{
		Code:     rmqerr.CodeMessagePropertyConflictWithType,
		Message:  "current message type FIFO does not match the topic's accepted message type NORMAL",
		Endpoint: "10.0.0.7:8081",
	})

	var re *rmqerr.Error
	switch {
	case errors.As(err, &re) && re.Code == rmqerr.CodeMessagePropertyConflictWithType:
		fmt.Println("wrong message type for the topic:", re.Code, int(re.Code))
	case errors.Is(err, rmqerr.ErrTimeout), errors.Is(err, rmqerr.ErrUnavailable):
		fmt.Println("try later")
	}
	fmt.Println(errors.Is(err, rmqerr.ErrBadRequest))
	// Output:
	// wrong message type for the topic: MESSAGE_PROPERTY_CONFLICT_WITH_TYPE 40014
	// true
}
