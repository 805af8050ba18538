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

#[test]
fn own_25_follow_ups_read_back_count_and_a_forgotten_document_counts_none() {
    let doc = Uuid::from_u128(1);
    let t = 10 * HOUR_MS;
    let mut taken = FollowUps::default();
    assert!(!taken.counts(doc, t), "nothing counted yet");
    taken.read_back(doc, (0..10).map(|n| t - HOUR_MS + 1 + n).collect());
    assert!(taken.counts(doc, t));
    assert!(!taken.allows(doc, t), "ten read back in the hour");
    assert!(
        taken.allows(doc, t + 1),
        "one millisecond on, the oldest is an hour old"
    );
    taken.forget(doc);
    assert!(!taken.counts(doc, t), "forgotten");
    taken.read_back(doc, Vec::new());
    assert!(!taken.counts(doc, t), "none read back: nothing counted");
}
