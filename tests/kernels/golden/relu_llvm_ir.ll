define void @relu_s0_relu(ptr noalias %b0, ptr noalias %b1, i64 %begin, i64 %end) #0 {
entry:
  br label %hdr1
hdr1:
  %t4 = phi i64 [0, %entry], [%t5, %exit9]
  %t6 = icmp slt i64 %t4, 3
  br i1 %t6, label %body2, label %exit3
body2:
  br label %hdr7
hdr7:
  %t10 = phi i64 [0, %body2], [%t11, %vdone18]
  %t12 = icmp slt i64 %t10, 3
  br i1 %t12, label %body8, label %exit9
body8:
  %t13 = mul i64 %t10, 8
  %t14 = add i64 %t13, 7
  %t15 = icmp slt i64 %t14, 20
  br i1 %t15, label %vec16, label %tail17
vec16:
  %t19 = mul i64 %t4, 20
  %t20 = mul i64 %t10, 8
  %t21 = add i64 %t19, %t20
  %t22 = getelementptr inbounds float, ptr %b0, i64 %t21
  %t23 = load <8 x float>, ptr %t22, align 4
  %t24 = insertelement <8 x float> poison, float 0x0000000000000000, i32 0
  %t25 = shufflevector <8 x float> %t24, <8 x float> poison, <8 x i32> zeroinitializer
  %t26 = fcmp ogt <8 x float> %t23, %t25
  %t27 = select <8 x i1> %t26, <8 x float> %t23, <8 x float> %t25
  %t28 = getelementptr inbounds float, ptr %b1, i64 %t21
  store <8 x float> %t27, ptr %t28, align 4
  br label %vdone18
tail17:
  br label %hdr29
hdr29:
  %t32 = phi i64 [0, %tail17], [%t33, %endif40]
  %t34 = icmp slt i64 %t32, 8
  br i1 %t34, label %body30, label %exit31
body30:
  %t35 = mul i64 %t10, 8
  %t36 = add i64 %t32, %t35
  %t37 = icmp slt i64 %t36, 20
  br i1 %t37, label %then38, label %endif40
then38:
  %t41 = mul i64 %t4, 20
  %t42 = add i64 %t41, %t32
  %t43 = mul i64 %t10, 8
  %t44 = add i64 %t42, %t43
  %t45 = getelementptr inbounds float, ptr %b0, i64 %t44
  %t46 = load float, ptr %t45, align 4
  %t47 = fcmp ogt float %t46, 0x0000000000000000
  %t48 = select i1 %t47, float %t46, float 0x0000000000000000
  %t49 = getelementptr inbounds float, ptr %b1, i64 %t44
  store float %t48, ptr %t49, align 4
  br label %endif40
endif40:
  %t33 = add nuw nsw i64 %t32, 1
  br label %hdr29, !llvm.loop !0
exit31:
  br label %vdone18
vdone18:
  %t11 = add nuw nsw i64 %t10, 1
  br label %hdr7, !llvm.loop !0
exit9:
  %t5 = add nuw nsw i64 %t4, 1
  br label %hdr1, !llvm.loop !0
exit3:
  ret void
}

define void @relu_s0_relu_job(ptr %argv, ptr %claims, i64 %threads, i64 %tid, i64 %extent, i64 %grain) #0 {
entry:
  %p0 = getelementptr ptr, ptr %argv, i64 0
  %b0 = load ptr, ptr %p0, align 8
  %p1 = getelementptr ptr, ptr %argv, i64 1
  %b1 = load ptr, ptr %p1, align 8
  call void @relu_s0_relu(ptr %b0, ptr %b1, i64 0, i64 0) #1
  ret void
}

attributes #0 = { nounwind "target-cpu"="haswell" "target-features"="+avx,+avx2,+fma,+sse4.2" "prefer-vector-width"="256" "min-legal-vector-width"="256" "frame-pointer"="none" }

attributes #1 = { noinline }

!0 = distinct !{!0, !1}
!1 = !{!"llvm.loop.mustprogress"}
