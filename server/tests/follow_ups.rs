//! OWN-25's rolling hour at its edge: ten follow-ups a document took, the first at T; another
//! is refused at T + 1 h − 1 ms and allowed at T + 1 h.

use chopin_server::chat::{FollowUps, FOLLOW_UPS_PER_HOUR};
use uuid::Uuid;

const HOUR_MS: i64 = 60 * 60 * 1000;

#[test]
fn own_25_ten_follow_ups_an_hour_at_the_edge_of_the_rolling_hour() {
    let (doc, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let mut taken = FollowUps::default();
    let t = 1_000_000;
    for n in 0..FOLLOW_UPS_PER_HOUR as i64 {
        assert!(taken.allows(doc, t + n * 1000), "follow-up {n}");
        taken.record(doc, t + n * 1000);
    }
    assert_eq!(FOLLOW_UPS_PER_HOUR, 10);
    assert!(!taken.allows(doc, t + 9_000), "the eleventh at once");
    assert!(
        !taken.allows(doc, t + HOUR_MS - 1),
        "T + 1 h − 1 ms: the first still counts"
    );
    assert!(
        taken.allows(doc, t + HOUR_MS),
        "T + 1 h: the first no longer counts"
    );
    taken.record(doc, t + HOUR_MS);
    assert!(
        !taken.allows(doc, t + HOUR_MS + 999),
        "ten again in the hour"
    );
    assert!(taken.allows(other, t), "per document");
}
