declare <8 x float> @llvm.maximum.v8f32(<8 x float>, <8 x float>)

declare float @llvm.maximum.f32(float, float)

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
  %t26 = call nsz <8 x float> @llvm.maximum.v8f32(<8 x float> %t23, <8 x float> %t25)
  %t27 = getelementptr inbounds float, ptr %b1, i64 %t21
  store <8 x float> %t26, ptr %t27, align 4
  br label %vdone18
tail17:
  br label %hdr28
hdr28:
  %t31 = phi i64 [0, %tail17], [%t32, %endif39]
  %t33 = icmp slt i64 %t31, 8
  br i1 %t33, label %body29, label %exit30
body29:
  %t34 = mul i64 %t10, 8
  %t35 = add i64 %t31, %t34
  %t36 = icmp slt i64 %t35, 20
  br i1 %t36, label %then37, label %endif39
then37:
  %t40 = mul i64 %t4, 20
  %t41 = add i64 %t40, %t31
  %t42 = mul i64 %t10, 8
  %t43 = add i64 %t41, %t42
  %t44 = getelementptr inbounds float, ptr %b0, i64 %t43
  %t45 = load float, ptr %t44, align 4
  %t46 = call nsz float @llvm.maximum.f32(float %t45, float 0x0000000000000000)
  %t47 = getelementptr inbounds float, ptr %b1, i64 %t43
  store float %t46, ptr %t47, align 4
  br label %endif39
endif39:
  %t32 = add nuw nsw i64 %t31, 1
  br label %hdr28, !llvm.loop !0
exit30:
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
