//! What each port error a frame meets is counted as: a receive refusal,
//! a descriptor fault of either way, a failed send — each to its
//! [`DropReason`], by an exhaustive match.

use super::{DropReason, Way};
use hvnet_port::virtq::DescriptorFault;
use hvnet_port::{RecvError, SendError, TeamRefusal};

impl DropReason {
    /// The reasons of one way, in counter order.
    pub fn of_way(way: Way) -> impl Iterator<Item = DropReason> {
        DropReason::ALL.into_iter().filter(move |r| r.way() == way)
    }

    /// The reason a frame a receiver refused is dropped for, or `None`
    /// when the error is about the queue (nothing ready, no buffer, the
    /// link, a failed read), not a frame, or the device took the frame
    /// itself ([`RecvError::Consumed`]).
    pub fn of_refused(e: &RecvError) -> Option<DropReason> {
        match e {
            RecvError::BadVnetHeader | RecvError::BadOffload(_) => Some(DropReason::BadVnetHeader),
            RecvError::BadFrame(_) => Some(DropReason::BadFrame),
            RecvError::TooManySegments => Some(DropReason::GsoSegments),
            RecvError::BadDescriptor(f) => Some(DropReason::of_fault(*f, Way::FromPort)),
            RecvError::NotTunnel => Some(DropReason::NotTunnel),
            RecvError::BadVxlan => Some(DropReason::BadVxlan),
            RecvError::WrongVni => Some(DropReason::Vni),
            RecvError::Team(why) => Some(match why {
                TeamRefusal::NotActiveMember => DropReason::TeamNotActiveMember,
                TeamRefusal::Looped => DropReason::TeamLooped,
                TeamRefusal::NotCollecting => DropReason::TeamNotCollecting,
                TeamRefusal::LacpMalformed => DropReason::LacpMalformed,
                TeamRefusal::LacpSecondPartner => DropReason::LacpSecondPartner,
                TeamRefusal::LacpNotRunning => DropReason::LacpNotRunning,
                TeamRefusal::LacpTooMany => DropReason::LacpTooMany,
            }),
            // Taken by the device, counted as `tunnel_control`.
            RecvError::Consumed => None,
            RecvError::WouldBlock
            | RecvError::NoBuffer
            | RecvError::Gone
            | RecvError::LinkDown
            | RecvError::Read(_) => None,
        }
    }
}

impl DropReason {
    /// The reason a descriptor chain refused for `fault` is dropped for:
    /// a transmit chain's (`FromPort`) or a receive chain's (`ToPort`).
    /// A fault one side cannot have (a receive chain is never too long; a
    /// transmit chain has no first buffer to be short) counts as the
    /// other fault of the same kind.
    pub fn of_fault(fault: DescriptorFault, way: Way) -> DropReason {
        use DescriptorFault as F;
        use DropReason as D;
        let (tx, rx) = match fault {
            F::Index => (D::TxDescIndex, D::RxDescIndex),
            F::Loop => (D::TxDescLoop, D::RxDescLoop),
            F::Indirect => (D::TxDescIndirect, D::RxDescIndirect),
            F::IndirectLen => (D::TxDescIndirectLen, D::RxDescIndirectLen),
            F::Memory => (D::TxDescMemory, D::RxDescMemory),
            F::AvailIndex => (D::TxDescAvailIndex, D::RxDescAvailIndex),
            F::Direction => (D::TxDescDirection, D::RxDescDirection),
            F::TooLong | F::Short => (D::TxDescTooLong, D::RxDescShort),
        };
        if way == Way::FromPort {
            tx
        } else {
            rx
        }
    }
}

impl From<SendError> for DropReason {
    fn from(e: SendError) -> DropReason {
        match e {
            SendError::Full => DropReason::VirtqueueFull,
            SendError::Failed => DropReason::WriteError,
            SendError::Unresolved => DropReason::TunnelUnresolved,
            SendError::NoMember => DropReason::TeamNoMember,
            SendError::BadDescriptor(f) => DropReason::of_fault(f, Way::ToPort),
        }
    }
}
