#![no_main]
//! Replica frames from the network (`PUT /1/replica`, `POST /1/replica/read` and its answer):
//! any bytes are refused or opened, never a panic. The envelope of a frame that parses is also
//! signed again with the key the reader trusts, so the checks behind the signature (payload
//! types, node agreement, sizes, digests, the kept push inside an answer) are reached too.
use libfuzzer_sys::fuzz_target;
use nodecare_protocol::replica::{
    frame, open_answer, open_kept, open_push, open_read, split_frame,
};
use nodecare_protocol::{HmacKey, KeyRing, Signer, VerifyPolicy};

const NOW: u64 = 1_800_000_000_000;

fn all(ring: &KeyRing, bytes: &[u8], node: &str) {
    let _ = open_push(ring, bytes, NOW, VerifyPolicy::default(), node);
    let _ = open_kept(ring, bytes, node);
    let _ = open_read(ring, bytes, NOW, VerifyPolicy::default(), node);
    let _ = open_answer(ring, bytes, NOW, VerifyPolicy::default(), node, "nonce-1", None);
    let _ = open_answer(ring, bytes, NOW, VerifyPolicy::default(), node, "nonce-1", Some(2));
}

fuzz_target!(|data: &[u8]| {
    let key = HmacKey::new(b"fuzz key\n".to_vec());
    let ring = KeyRing::single(key.clone());
    all(&ring, data, "node1");
    if let Ok((envelope, rest)) = split_frame(data) {
        let signer = Signer::new(key, envelope.node.clone());
        if let Ok(resigned) = signer.sign(envelope.payload, envelope.sequence, NOW, 60_000)
            && let Ok(bytes) = frame(&resigned, rest)
        {
            all(&ring, &bytes, &resigned.node);
        }
    }
});
