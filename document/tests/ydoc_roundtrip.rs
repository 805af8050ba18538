//! The yrs bridge carries any source change to another doc exactly.

use chopin_document::ydoc::{
    apply_update, empty_doc, encode_state, new_doc, read_source, replace_source,
};
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    "[a-z \\n\\r😀🎉漢字東京港é]{0,60}"
}

proptest! {
    #[test]
    fn any_change_round_trips(old in text(), new in text()) {
        let server = new_doc(10, &old);
        let client = empty_doc(11);
        apply_update(&client, &encode_state(&server)).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(read_source(&client), old);
        let update = replace_source(&server, &new);
        prop_assert_eq!(read_source(&server), new.clone());
        let on_client = apply_update(&client, &update).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(on_client, new);
    }
}
